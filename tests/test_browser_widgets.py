"""The interactive figures in a real browser (headless Chromium): every control of the explorer
moved, what the page then shows compared with the library's own sweep and headline and with the
command line's; each chapter widget moved and read; every page that holds one loaded with the
network switched off, no request leaving the machine, the explorer under its page weight and
usable 400 pixels wide."""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from pathlib import Path

import browser
from conftest import HTML, run_cli
from dmlimits import search
from dmlimits.book import explorer, explorer_page, interactive
from dmlimits.book.glue import sci
from dmlimits.core import scenario as sc

pytestmark = browser.MARKS

EXPLORER = "notebooks/explorer.html"
#: Each chapter widget: its page and its HTML id.
WIDGETS = {
    "pipeline-bubble": "notebooks/pipeline.html",
    "allreduce-time": "notebooks/collectives.html",
    "matmul-efficiency": "notebooks/matmul.html",
    "strong-scaling": "notebooks/diminishing_returns.html",
}
#: The explorer's page weight, everything it loads (issue: under 5 MB).
PAGE_WEIGHT = 5_000_000

WAIT_DRAWN = """
const [id, before, done] = arguments;
const start = Date.now();
(function poll() {
  const root = document.getElementById(id);
  const n = root ? +(root.dataset.drawn || 0) : 0;
  if (n > before) done(n);
  else if (Date.now() - start > 15000) done(-1);
  else setTimeout(poll, 25);
})();
"""
MOVE = """
const [el, value] = arguments;
el.value = String(value);
el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true}));
"""
READ_EXPLORER = """
const root = document.getElementById('explorer');
const plot = document.getElementById('explorer-plot');
const rows = [...document.querySelectorAll('#explorer-numbers tr')];
return {
  setting: root.dataset.setting, onGrid: root.dataset.onGrid,
  status: document.getElementById('explorer-status').textContent,
  headline: Object.fromEntries(rows.map(r => [r.dataset.key, r.dataset.value])),
  shown: Object.fromEntries(rows.map(r => [r.dataset.key, r.children[1].textContent])),
  x: plot.data ? plot.data[0].x : null, y: plot.data ? plot.data[0].y : null,
  commands: document.getElementById('explorer-commands').textContent,
  yaml: document.getElementById('explorer-yaml').textContent,
};
"""


def drawn(driver, element_id: str) -> int:
    return int(driver.execute_script(
        f"return +(document.getElementById('{element_id}').dataset.drawn || 0)"))  # fmt: skip


def move(driver, element_id: str, control_id: str, value) -> None:
    """Move one control (a slider or a drop-down) and wait until the widget has drawn again."""
    from selenium.webdriver.common.by import By

    before = drawn(driver, element_id)
    driver.execute_script(MOVE, driver.find_element(By.ID, control_id), value)
    assert driver.execute_async_script(WAIT_DRAWN, element_id, before) > before, control_id


def open_page(driver, base: str, page: str, element_id: str) -> None:
    driver.get(f"{base}/{page}")
    assert driver.execute_async_script(WAIT_DRAWN, element_id, 0) > 0, f"{page}: never drawn"


def same(shown: str, value: float) -> bool:
    return (shown == "" and not math.isfinite(value)) or float(shown) == value


def compare_with_library(state: dict, scn: sc.Scenario) -> None:
    head = search.headline(scn)
    for key, _ in explorer_page.HEADLINE:
        assert same(state["headline"][key], head[key]), (state["setting"], key)
        if math.isfinite(head[key]):
            assert state["shown"][key] == sci(head[key]) + " FLOP", (state["setting"], key)
    rows = [r for r in search.sweep(scn) if r["feasible"]]
    assert state["x"] == [r["training_flop"] for r in rows], state["setting"]
    assert state["y"] == [r["utilization"] for r in rows], state["setting"]


def test_every_control_of_the_explorer_shows_the_library_s_sweep(built_book):
    scn = sc.resolve("h100")
    settings = explorer.settings(scn)
    with browser.serve(HTML) as base, browser.chromium() as driver:
        open_page(driver, base, EXPLORER, "explorer")
        for gpu, gbase in explorer.bases(scn).items():
            move(driver, "explorer", "explorer-gpu", gpu)
            home = explorer.positions(gbase)[0]
            state = driver.execute_script(READ_EXPLORER)
            assert state["setting"] == explorer.setting_id(gpu, home)
            compare_with_library(state, settings[state["setting"]])
            for i, c in enumerate(explorer.CONTROLS):
                away = 0 if home[i] != 0 else len(c.stops(gbase)) - 1
                move(driver, "explorer", f"explorer-{c.key}", away)
                want = explorer.setting_id(gpu, (*home[:i], away, *home[i + 1 :]))
                state = driver.execute_script(READ_EXPLORER)
                assert state["setting"] == want and state["onGrid"] == "1"
                compare_with_library(state, settings[want])
                move(driver, "explorer", f"explorer-{c.key}", home[i])


def test_three_settings_show_what_the_command_line_prints(built_book):
    """One setting per GPU family, each read off the page and run as the page says."""
    moves = {"v100": {"hardware.kernel_latency": 2}, "a100": {"training.months": 2},
             "h100": {"network.inter_node.bandwidth": 0, "network.latency": 2}}  # fmt: skip
    with browser.serve(HTML) as base, browser.chromium() as driver:
        open_page(driver, base, EXPLORER, "explorer")
        for gpu, changes in moves.items():
            move(driver, "explorer", "explorer-gpu", gpu)
            for key, index in changes.items():
                move(driver, "explorer", f"explorer-{key}", index)
            state = driver.execute_script(READ_EXPLORER)
            assert state["onGrid"] == "1"
            command = state["commands"].splitlines()[1].split()
            assert command[:4] == ["python", "-m", "dmlimits", "headline"]
            assert len(re.findall("--set", " ".join(command))) == len(changes)
            head = run_cli(*command[3:], "--json")
            assert head.returncode == 0, head.stderr
            printed = json.loads(head.stdout)
            for key, _ in explorer_page.HEADLINE:
                assert same(state["headline"][key], printed[key]), (gpu, key)
            swept = run_cli("sweep", *command[4:], "--format", "json")
            assert swept.returncode == 0, swept.stderr
            rows = [r for r in json.loads(swept.stdout) if r["feasible"]]
            assert state["x"] == [r["training_flop"] for r in rows]
            assert state["y"] == [r["utilization"] for r in rows]
            before = drawn(driver, "explorer")
            driver.find_element("id", "explorer-reset").click()
            assert driver.execute_async_script(WAIT_DRAWN, "explorer", before) > before


READ_CONFIG = """
return Object.fromEntries([...document.querySelectorAll('#explorer-config tr')]
  .map(r => [r.dataset.key, [r.dataset.value, r.children[1].textContent]]));
"""


def test_the_page_prints_numbers_as_the_book_s_prose_does(built_book):
    values = [0, 1, 7, 12, 4096, 9_999_999, 0.5, 0.001, 0.00123, 1234.5, 12345.6, 99999.4,
              123456.7, 1e7, 2.05e28, 9.996e28, 1.25e-4, 3.0e-9, -0.75, -2.5e30,
              0.0447]  # fmt: skip
    with browser.serve(HTML) as base, browser.chromium() as driver:
        open_page(driver, base, EXPLORER, "explorer")
        shown = driver.execute_script(
            "return arguments[0].map(v => window.dmlimitsWidgets.fmt(v));", values)
    assert shown == [sci(v) for v in values]


def test_the_picked_compute_shows_the_search_s_configuration_and_stays_put(built_book):
    scn = sc.resolve("h100")
    settings = explorer.settings(scn)
    with browser.serve(HTML) as base, browser.chromium() as driver:
        open_page(driver, base, EXPLORER, "explorer")
        home = driver.execute_script(READ_EXPLORER)["setting"]
        rows = search.sweep(settings[home])
        for k in (0, 10, 20, 30):
            move(driver, "explorer", "explorer-pick", k)
            config = driver.execute_script(READ_CONFIG)
            if not rows[k]["feasible"]:
                continue
            for key in ("n_gpu", "dp", "tp_model", "pp", "ep", "m", "utilization", "binding"):
                assert config[key][0] == str(rows[k][key]) or float(config[key][0]) == rows[k][key]
            assert config["binding"][1] == search.LOSS_LABELS[rows[k]["binding"]]
        # Switching to a mixture of experts keeps the compute, not the index: the nearest point
        picked = rows[20]["training_flop"]
        sparse = [c.key for c in explorer.CONTROLS].index("model.sparse")
        move(driver, "explorer", "explorer-pick", 20)
        move(driver, "explorer", "explorer-model.sparse", 1)
        state = driver.execute_script(READ_EXPLORER)
        assert state["setting"].split(",")[sparse] == "1"
        grid = [r["training_flop"] for r in search.sweep(settings[state["setting"]])]
        nearest = min(range(len(grid)), key=lambda i: abs(math.log(grid[i] / picked)))
        index = driver.execute_script("return +document.getElementById('explorer-pick').value")
        assert index == nearest and nearest != 20
        # Another GPU starts from its own values; the reset button goes back to them.
        move(driver, "explorer", "explorer-gpu", "a100")
        a100_home = explorer.setting_id("a100", explorer.positions(explorer.bases(scn)["a100"])[0])
        assert driver.execute_script(READ_EXPLORER)["setting"] == a100_home
        move(driver, "explorer", "explorer-network.latency", 0)
        assert driver.execute_script(READ_EXPLORER)["setting"] != a100_home
        before = drawn(driver, "explorer")
        driver.find_element("id", "explorer-reset").click()
        assert driver.execute_async_script(WAIT_DRAWN, "explorer", before) > before
        assert driver.execute_script(READ_EXPLORER)["setting"] == a100_home


def off_grid_on_the_a100(site: Path) -> dict:
    """What the explorer of ``site`` shows on the A100 with the run halved and HBM doubled (two
    controls at once, off the grid)."""
    with browser.serve(site) as base, browser.chromium() as driver:
        open_page(driver, base, EXPLORER, "explorer")
        move(driver, "explorer", "explorer-gpu", "a100")
        move(driver, "explorer", "explorer-training.months", 0)
        move(driver, "explorer", "explorer-hardware.hbm_bandwidth", 2)
        state = driver.execute_script(READ_EXPLORER)
    assert state["onGrid"] == "0"
    return state


def test_an_off_grid_command_keeps_the_book_s_own_assumptions(built_book, tmp_path):
    """The explorer of a book built with overrides: the command it prints off the grid builds
    the book's assumptions with the moved controls, as the page's data for that book says."""
    scn = sc.resolve("h100", ["training.months=6", "model.ff_ratio=3"])
    copy = tmp_path / "html"
    shutil.copytree(HTML, copy)
    page = copy / EXPLORER
    payload = json.dumps(interactive.json_safe(explorer_page.data(scn)), separators=(",", ":"))
    text = re.sub(r'(id="explorer-data">).*?(</script>)',
                  lambda m: m.group(1) + payload.replace("<", "\\u003c") + m.group(2),
                  page.read_text(), count=1, flags=re.S)  # fmt: skip
    page.write_text(text)
    base_a100 = explorer.bases(scn)["a100"]
    keys = [c.key for c in explorer.CONTROLS]
    state = off_grid_on_the_a100(copy)
    command = state["status"].split("Build the book for it with ")[1].split()
    assert command[:5] == ["python", "-m", "dmlimits", "build", "--scenario"]
    position = list(explorer.positions(base_a100)[0])
    position[keys.index("training.months")] = 0
    position[keys.index("hardware.hbm_bandwidth")] = 2
    want = explorer.scenario_at(base_a100, tuple(position))
    got = sc.resolve(command[5], command[7::2])
    assert got.values == want.values
    assert want["training.months"] == 3.0 and want["model.ff_ratio"] == 3.0


def test_two_controls_off_the_grid_are_said_to_be_with_the_command(built_book):
    state = off_grid_on_the_a100(HTML)
    assert "Off the grid" in state["status"]
    a100 = sc.resolve("a100")
    # the sets in the order of the controls
    assert (f"python -m dmlimits build --scenario a100 --set hardware.hbm_bandwidth="
                f"{a100['hardware.hbm_bandwidth'] * 2.0!r} --set training.months="
                f"{a100['training.months'] * 0.5!r}") in state["status"]  # fmt: skip


def widget_state(driver, element_id: str) -> dict:
    return driver.execute_script(f"""
      const root = document.getElementById('{element_id}');
      return [...root.querySelectorAll('.dmlimits-readout-item')]
        .map(e => [e.dataset.series, e.dataset.value]);""")  # fmt: skip


def test_each_chapter_widget_moves_and_reads_its_own_data(built_book):
    from selenium.webdriver.common.by import By

    with browser.serve(HTML) as base, browser.chromium() as driver:
        for element_id, page in WIDGETS.items():
            open_page(driver, base, page, element_id)
            data = json.loads(driver.find_element(By.ID, f"{element_id}-data")
                              .get_attribute("textContent"))  # fmt: skip
            x = data["x"]["control"]
            others = [c for c in data["controls"] if c["name"] != x]
            for c in data["controls"]:
                for index in (0, len(c["values"]) - 1):
                    move(driver, element_id, f"{element_id}-{c['name']}", index)
                    positions = {
                        k["name"]: int(driver.find_element(
                            By.ID, f"{element_id}-{k['name']}").get_attribute("value"))
                        for k in data["controls"]
                    }  # fmt: skip
                    key = ",".join(str(positions[k["name"]]) for k in others)
                    want = [(s["name"], s["y"][positions[x]]) for s in data["series"][key]]
                    got = widget_state(driver, element_id)
                    assert [name for name, _ in got] == [name for name, _ in want]
                    for (_, shown), (_, value) in zip(got, want, strict=True):
                        assert (shown == "" and value is None) or float(shown) == value


def requests_of(driver) -> list[dict]:
    out = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.loadingFinished"):
            out.append(message)
    return out


def page_requests(driver, base: str, page: str, element_id: str) -> tuple[list[str], int]:
    """Open ``page`` and return the addresses it asked for beyond the site (the page's own
    requests, and any request of the browser to the network), and the bytes it loaded from the
    site.  The browser's start page (chrome://) is the browser's, not the page's."""
    driver.get_log("performance")
    open_page(driver, base, page, element_id)
    # every font the page uses loaded, then a second for any request still to start
    driver.execute_async_script("document.fonts.ready.then(() => arguments[0]())")
    time.sleep(1.0)
    log = requests_of(driver)
    sent = [m["params"] for m in log if m["method"] == "Network.requestWillBeSent"]
    mine = [p["request"]["url"] for p in sent if p.get("documentURL", "").startswith(base)]
    assert any(u.endswith(".js") for u in mine), f"{page}: no script requested"
    away = [u for u in mine if not u.startswith((base, "data:", "blob:"))]
    away += [p["request"]["url"] for p in sent
             if p["request"]["url"].startswith(("http:", "https:", "ws:", "wss:"))
             and not p["request"]["url"].startswith(base) and p["request"]["url"] not in away]
    ids = {p["requestId"] for p in sent if p["request"]["url"].startswith(base)}
    weight = sum(m["params"]["encodedDataLength"] for m in log
                 if m["method"] == "Network.loadingFinished" and m["params"]["requestId"] in ids)
    return away, weight  # fmt: skip


def test_the_interactive_pages_load_offline_and_ask_nothing_of_the_network(built_book):
    pages = {EXPLORER: "explorer", **{page: eid for eid, page in WIDGETS.items()}}
    with browser.serve(HTML) as base, browser.chromium(performance=True) as driver:
        for page, element_id in pages.items():
            away, weight = page_requests(driver, base, page, element_id)
            assert not away, f"{page}: {away}"
            if page == EXPLORER:
                assert 1_000_000 < weight < PAGE_WEIGHT, weight
        # And from the files themselves, with the browser's network emulated offline.
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        for page, element_id in pages.items():
            driver.get((Path(HTML) / page).resolve().as_uri())
            assert driver.execute_async_script(WAIT_DRAWN, element_id, 0) > 0, page


def test_a_script_from_a_cdn_is_caught_and_named(built_book, tmp_path):
    copy = tmp_path / "html"
    shutil.copytree(HTML, copy)
    page = copy / EXPLORER
    cdn = "https://cdn.example.org/plotly.min.js"
    page.write_text(page.read_text().replace("</head>", f'<script src="{cdn}"></script></head>', 1))
    with browser.serve(copy) as base, browser.chromium(performance=True) as driver:
        away, _ = page_requests(driver, base, EXPLORER, "explorer")
    assert away == [cdn]


def test_every_interactive_page_fits_a_400_pixel_window(built_book):
    pages = {EXPLORER: "explorer", **{page: eid for eid, page in WIDGETS.items()}}
    with browser.serve(HTML) as base, browser.chromium() as driver:
        driver.set_window_size(400, 900)
        for page, element_id in pages.items():
            open_page(driver, base, page, element_id)
            sizes = driver.execute_script(f"""
              const root = document.getElementById('{element_id}');
              const plot = root.querySelector('.dmlimits-plot').getBoundingClientRect();
              return {{page: document.documentElement.scrollWidth, window: window.innerWidth,
                       root: root.scrollWidth, box: root.clientWidth, plot: plot.width}};""")
            assert sizes["page"] <= sizes["window"] + 1, (page, sizes)
            assert sizes["root"] <= sizes["box"] + 2, (page, sizes)
            assert sizes["plot"] > 250, (page, sizes)
        open_page(driver, base, EXPLORER, "explorer")
        move(driver, "explorer", "explorer-network.latency", 0)
        assert driver.execute_script(READ_EXPLORER)["onGrid"] == "1"

"""The interactive figures: the explorer's grid, the data its page reads, the widgets'
specifications, and the pinned charting library.  The browser tests (test_browser_widgets.py)
move the controls in Chromium; these check what the pages are given."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import EXECUTED
from dmlimits import search
from dmlimits.book import (
    collectives_page,
    explorer,
    explorer_page,
    interactive,
    matmul_page,
    measured_figures,
    pipeline_page,
)
from dmlimits.build import vendor
from dmlimits.core import assets
from dmlimits.core import scenario as sc
from dmlimits.core.plumbing import digest
from dmlimits.costs.collectives import allreduce_time, allreduce_time_split
from dmlimits.costs.matmul import pass_efficiency
from dmlimits.costs.pipeline import bubble_fraction
from dmlimits.measured import confront, runs


# --- The explorer's grid -------------------------------------------------------------------------
def test_the_grid_is_the_base_each_control_alone_and_the_pairs():
    scn = sc.resolve("h100")
    base = explorer.bases(scn)["h100"]
    alone = sum(len(c.stops(base)) - 1 for c in explorer.CONTROLS)
    pairs = math.prod(len(explorer.FACTORS) - 1 for _ in explorer.PAIRS[0])  # both moved
    for with_pairs, extra in ((False, 0), (True, pairs)):
        found = explorer.positions(base, with_pairs)
        assert len(found) == len(set(found)) == 1 + alone + extra
        assert explorer.overrides(base, found[0]) == {}
    size = explorer.grid_size(scn)
    assert size == {"total": 3 * (1 + alone) + pairs, "v100": 1 + alone, "a100": 1 + alone,
                    "h100": 1 + alone + pairs}  # fmt: skip
    assert len(explorer.settings(scn)) == size["total"]


def test_each_stop_is_the_gpus_own_value_times_its_factor():
    for gpu, base in explorer.bases(sc.resolve("h100")).items():
        assert base["gpu"] == gpu
        for c in explorer.CONTROLS:
            stops = c.stops(base)
            assert stops[c.base_index(base)] == base[c.key]
            if c.factors:
                assert stops == tuple(base[c.key] * f for f in c.factors)


def test_a_changed_assumption_reaches_every_setting_of_the_explorer():
    scn = sc.resolve("h100", ["training.months=6", "network.latency=3e-6"])
    settings = explorer.settings(scn)
    months = explorer.CONTROLS[[c.key for c in explorer.CONTROLS].index("training.months")]
    for name, s in settings.items():
        gpu, pos = name.split(":")
        position = tuple(int(j) for j in pos.split(","))
        home = explorer.positions(explorer.bases(scn)[gpu])[0]
        i = explorer.CONTROLS.index(months)
        if position[i] == home[i]:
            assert s["training.months"] == 6
        else:
            assert s["training.months"] == 6 * months.factors[position[i]]
    # every setting differs from the default book's setting of the same name
    default = explorer.settings(sc.resolve("h100"))
    assert all(settings[k].values != default[k].values for k in default)


def test_each_setting_taken_home_resolves_to_the_same_scenario(tmp_path):
    scn = sc.resolve("h100", ["training.months=6"])
    for name, s in explorer.settings(scn).items():
        gpu = name.split(":")[0]
        home = explorer_page.take_home(gpu, s, sc.resolve(gpu))
        path = tmp_path / "explorer.yaml"
        path.write_text(home["yaml"])
        assert sc.resolve(str(path)).values == s.values, name
        sets = re.findall(r"--set (\S+)", home["headline_command"])
        assert sc.resolve(gpu, sets).values == s.values, name
        assert home["headline_command"].startswith(f"python -m dmlimits headline --scenario {gpu}")


def test_a_value_on_the_command_line_reads_back_exactly():
    for value in (2.25e-06, 1 / 3, 12500000000.0, 0.041666666666666664, True, "deepseek", 6):
        _, back = sc.parse_set(f"k={explorer_page.command_value(value)}")
        assert back == value and type(back) is type(value), (value, back)


def test_what_the_page_shows_of_a_setting_is_the_search_s_own():
    s = sc.resolve("a100", ["network.latency=9e-06"])
    got = explorer_page.result(s)
    rows = search.sweep(s)
    head = search.headline(s)
    assert got["headline"] == {k: head[k] for k, _ in explorer_page.HEADLINE}
    for k in explorer_page.COLUMNS:
        want = [r.get(k, math.nan) for r in rows]  # an infeasible model has no configuration
        assert len(got["sweep"][k]) == len(want), k
        tol = 10.0 ** (1 - explorer_page.ROUNDED_DIGITS) if k in explorer_page.ROUNDED else 0.0
        assert all(
            a == b or (a != a and b != b) or math.isclose(a, b, rel_tol=tol)
            for a, b in zip(got["sweep"][k], want, strict=True)
        ), k
    assert got["sweep"]["utilization"] == [r["utilization"] for r in rows]  # the curve: exact
    assert any(r["feasible"] for r in rows) and not all(r["feasible"] for r in rows)
    parts = [got["sweep"]["ideal"][i] + sum(got["sweep"][f"loss_{k}"][i] for k in search.LOSSES)
             for i in range(len(rows))]  # fmt: skip
    feasible = [i for i, r in enumerate(rows) if r["feasible"]]
    assert feasible
    # the step's parts add up to the step, each part rounded to ROUNDED_DIGITS figures
    tol = 5 * 10.0 ** (1 - explorer_page.ROUNDED_DIGITS)
    for i in feasible:
        names = ("ideal", *(f"loss_{x}" for x in search.LOSSES))
        scale = sum(abs(got["sweep"][k][i]) for k in names)
        assert abs(parts[i] - rows[i]["t_step"]) <= tol * scale, i
    # a missing headline number is said in words, by why it is missing
    sparse = explorer_page.result(sc.resolve("h100-sparse"))
    assert sparse["missing"]["t_crit_own_flop"] == "none: the closed forms are for dense models"


# --- The widgets' specifications -----------------------------------------------------------------
def _controls():
    return [
        {"name": "a", "label": "A", "values": [1, 2], "labels": ["1", "2"], "initial": 0},
        {"name": "x", "label": "X", "values": [1, 10, 100], "labels": ["1", "10", "100"],
         "initial": 1},
    ]  # fmt: skip


def _series(y=(0.1, 0.2, 0.3)):
    return {(i,): [{"name": "s", "x": [1, 10, 100], "y": list(y)}] for i in range(2)}


def test_a_curves_widget_carries_its_data_and_the_site_s_scripts():
    w = interactive.curves("w-1", "T", _controls(), "x", "X", "Y", _series((0.1, math.nan, 0.3)))
    html = w._repr_html_()
    payload = re.search(r'<script type="application/json" id="w-1-data">(.*?)</script>', html)
    data = json.loads(payload.group(1))
    assert data["series"]["0"][0]["y"] == [0.1, None, 0.3]  # NaN is a gap, never invalid JSON
    assert f"_static/vendor/{assets.PLOTLY.file_name}" in html
    assert "https://" not in html and "http://" not in html
    assert repr(w) == "T"


def test_a_string_in_the_data_can_neither_end_the_script_element_nor_open_a_comment():
    spec = _controls()
    spec[0]["labels"] = ["</script><b>", "<!--<script"]
    html = interactive.curves("w", "T", spec, "x", "X", "Y", _series())._repr_html_()
    assert html.count("</script>") == 4  # the data's own end and the three scripts'
    payload = re.search(r'id="w-data">(.*?)</script>', html).group(1)
    assert "<" not in payload
    assert json.loads(payload)["controls"][0]["labels"] == ["</script><b>", "<!--<script"]


def test_the_widgets_scripts_are_addressed_by_their_bytes():
    html = interactive.page_assets()
    for name in ("widget.js", "explorer.js", "widgets.css"):
        version = digest((assets.STATIC / name).read_bytes())[:12]
        assert f"dmlimits/{name}?v={version}" in html


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c, s: ("nope", c, s), "x_control: got 'nope'; expected one of a, x"),
        (lambda c, s: ("x", c, {(0,): s[(0,)]}), "series: 1 positions, 1 missing (first [(1,)])"),
        (lambda c, s: ("x", c, {(0,): s[(0,)], (5,): s[(0,)]}),
         "1 missing (first [(1,)]) and 1 unknown (first [(5,)])"),
        (lambda c, s: ("x", [{"name": "a"}, c[1]], s),
         "controls[0]: no label, values, labels, initial; expected name, label"),
        (lambda c, s: ("x", c, {k: [{**v[0], "y": [1.0]}] for k, v in s.items()}),
         "1 values of y; expected 3, one per value of x"),
        (lambda c, s: ("x", [c[0], {**c[1], "initial": 3}], s),
         "control x: initial 3; expected an index below 3"),
        (lambda c, s: ("x", [c[0], {**c[1], "labels": ["1"]}], s),
         "control x: 3 values and 1 labels; expected as many labels as values"),
        (lambda c, s: ("x", c, {k: [{**v[0], "x": [1, 2, 3]}] for k, v in s.items()}),
         "x is not x's values; expected them"),
    ],
)  # fmt: skip
def test_a_widget_that_the_page_could_not_read_is_refused_in_one_line(change, message):
    x, controls, series = change(_controls(), _series())
    with pytest.raises(interactive.WidgetError) as e:
        interactive.curves("w", "T", controls, x, "X", "Y", series)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_element_id_or_kind_the_page_does_not_know_is_refused():
    with pytest.raises(interactive.WidgetError, match="element_id: got 'a b'; expected letters"):
        interactive.embed("curves", "a b", {}, "x")
    with pytest.raises(interactive.WidgetError, match="kind: got 'pie'; expected one of curves"):
        interactive.embed("pie", "a", {}, "x")


def test_json_safe_makes_numpy_values_plain_and_non_finite_values_gaps():
    got = interactive.json_safe({"a": np.array([1.0, np.inf]), "b": np.int64(3),
                                 "c": (np.bool_(True), np.float32(0.5))})  # fmt: skip
    assert got == {"a": [1.0, None], "b": 3, "c": [True, 0.5]}
    assert json.dumps(got, allow_nan=False)


# --- The pinned charting library --------------------------------------------------------------
def _pin_for(tarball: bytes) -> assets.Vendored:
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    return assets.Vendored("some-package", "1.2.3", "lib.min.js", integrity, "lib-1.2.3.js")


def _tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_vendored_file_is_taken_from_a_tarball_with_the_pinned_integrity():
    tarball = _tarball({"package/lib.min.js": b"window.Lib = 1;"})
    pin = _pin_for(tarball)
    assert vendor.extract(pin, tarball) == b"window.Lib = 1;"
    assert vendor.tarball_url(pin) == f"{vendor.REGISTRY}/some-package/-/some-package-1.2.3.tgz"
    with pytest.raises(ValueError, match=r"some-package@1.2.3: integrity sha512-.*; expected"):
        vendor.extract(pin, tarball + b"tampered")
    with pytest.raises(ValueError, match=r"no file package/other\.js"):
        vendor.extract(
            assets.Vendored(pin.package, pin.version, "other.js", pin.integrity, "x"), tarball
        )


def test_a_kept_vendored_file_is_read_not_downloaded(tmp_path, monkeypatch):
    pin = _pin_for(b"")
    (tmp_path / pin.file_name).write_text("kept")

    def no_network(*args, **kwargs):
        raise AssertionError("downloaded a file that was kept")

    monkeypatch.setattr(vendor.urllib.request, "urlopen", no_network)
    assert vendor.fetch(pin, tmp_path).read_text() == "kept"


def test_an_unreachable_registry_is_named_in_one_line(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr(vendor.urllib.request, "urlopen", refused)
    with pytest.raises(OSError, match=r"some-package-1.2.3.tgz: could not download") as e:
        vendor.fetch(_pin_for(b"x"), tmp_path)
    assert "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_the_widgets_files_are_there_and_fetch_nothing_themselves():
    for name in assets.STATIC_FILES:
        text = (assets.STATIC / name).read_text()
        assert "http://" not in text and "https://" not in text, name
        assert "fetch(" not in text and "XMLHttpRequest" not in text, name


# --- The executed pages carry what the library computes ------------------------------------
def _spec(widget) -> dict:
    return json.loads(re.search(r'-data">(.*?)</script>', widget.markup).group(1))


def test_the_all_reduce_widget_s_values_are_the_collectives_module_s():

    scn = sc.resolve("h100")
    data = _spec(collectives_page.allreduce_widget(scn, 16, points=7))
    size = np.array(data["controls"][1]["values"])
    words = size / scn["model.word_bytes"]
    node = scn["network.node_size"]
    assert [c["values"] for c in data["controls"][:1]] == [[1, 2, 4, 8, 16]]
    one, four = data["series"]["0"], data["series"]["2"]
    assert one[0]["y"] == list(allreduce_time(scn, words, node, 0).total)
    assert four[1]["y"] == list(allreduce_time_split(scn, words, node, 4).total)
    assert four[1]["name"] == f"4 nodes ({4 * node} GPUs), two levels"


def test_the_matmul_widget_s_values_are_the_matmul_model_s():

    scns = [sc.resolve("a100"), sc.resolve("h100")]
    data = _spec(matmul_page.efficiency_widget(scns, 4.0))
    nb = data["controls"][2]["values"]
    d = data["controls"][1]["values"][3]
    assert data["series"]["1,3"][0]["y"] == [
        float(pass_efficiency(scns[1], float(d), 4.0 * d, float(b))) for b in nb
    ]


def test_the_strong_scaling_widget_s_values_are_the_model_of_measured_runs():

    curves = {"h100": confront.scaling("h100")}
    data = _spec(measured_figures.scaling_widget(curves))
    for j, shape in enumerate(confront.SHAPES):
        for line, strategy in zip(data["series"][f"0,{j}"], runs.STRATEGIES, strict=True):
            want = curves["h100"][(shape, strategy)]["tokens_per_s_per_gpu"]
            assert line["name"] == strategy
            assert line["y"] == [float(y) if np.isfinite(y) else None for y in want]


def _embedded(notebook: str, element_id: str) -> dict:
    nb = json.loads((EXECUTED / notebook).read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            html = "".join(out.get("data", {}).get("text/html", ""))
            m = re.search(rf'id="{element_id}-data">(.*?)</script>', html, re.S)
            if m:
                return json.loads(m.group(1))
    raise AssertionError(f"{notebook}: no widget {element_id}")


@pytest.mark.book
def test_the_explorer_page_holds_the_search_s_results_for_every_gpu(built_book):
    data = _embedded("explorer.ipynb", "explorer")
    scn = sc.resolve("h100")
    settings = explorer.settings(scn)
    assert set(data["results"]) == set(settings)
    # one setting per GPU off its own values (the H100 one a pair: InfiniBand and latency)
    for name in ("v100:1,1,1,2,1,1,0,1,0", "a100:1,1,1,1,1,2,0,1,0", "h100:1,0,2,1,1,1,0,1,0"):
        s = settings[name]
        assert data["results"][name]["headline"] == {
            k: (v if math.isfinite(v) else None)
            for k, v in search.headline(s).items() if k in data["results"][name]["headline"]
        }  # fmt: skip
        rows = search.sweep(s)
        assert data["pool"][data["results"][name]["sweep"]["utilization"]] == [
            r["utilization"] if math.isfinite(r["utilization"]) else None for r in rows
        ]


@pytest.mark.book
@pytest.mark.parametrize(
    ("notebook", "element_id"),
    [("pipeline.ipynb", "pipeline-bubble"), ("collectives.ipynb", "allreduce-time"),
     ("matmul.ipynb", "matmul-efficiency"), ("diminishing_returns.ipynb", "strong-scaling")],
)  # fmt: skip
def test_each_chapter_widget_sits_in_its_chapter_with_every_curve(built_book, notebook, element_id):
    data = _embedded(notebook, element_id)
    xs = next(c["values"] for c in data["controls"] if c["name"] == data["x"]["control"])
    x = data["x"]["control"]
    want = math.prod(len(c["values"]) for c in data["controls"] if c["name"] != x)
    assert len(data["series"]) == want
    for lines in data["series"].values():
        assert all(line["x"] == xs for line in lines)
        assert any(y is not None for line in lines for y in line["y"])


def test_the_pipeline_widget_s_values_are_the_bubble_formula_s():

    data = _spec(pipeline_page.bubble_widget((2, 8), (1, 4), 64))
    line = data["series"]["1,1"][0]  # eight stages, v = 4
    assert line["name"] == "v = 4"
    assert line["y"] == [float(bubble_fraction(8, m, 4)) for m in range(1, 65)]


def test_the_explorer_page_is_listed_in_the_book():
    toc = Path(__file__).resolve().parent.parent / "_toc.yml"
    assert "notebooks/explorer" in toc.read_text()

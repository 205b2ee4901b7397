"""Scenarios: presets, files, overrides, and refusal of bad input with a one-line message."""

import math

import pytest
from dmlimits.core import hardware
from dmlimits.core.scenario import SCHEMA, ScenarioError, preset_names, resolve


def test_default_is_the_paper_baseline():
    scn = resolve()
    assert scn.name == "h100"
    assert scn["gpu"] == "h100"
    assert scn["training.months"] == SCHEMA["training.months"].default
    for key, value in hardware.gpu_values("h100").items():
        assert scn[key] == value


def test_peak_flops_is_the_product_of_its_parts():
    scn = resolve("h100")
    v = scn.values
    parts = (
        v["hardware.flop_per_clock_per_thread"],
        v["hardware.threads_per_sm"],
        v["hardware.sms"],
        v["hardware.max_clock"],
    )
    assert scn.peak_flops == math.prod(parts)


@pytest.mark.parametrize("gpu", hardware.gpu_names())
def test_gpu_override_brings_its_preset(gpu):
    scn = resolve("h100", [f"gpu={gpu}"])
    for key, value in hardware.gpu_values(gpu).items():
        assert scn[key] == value


def test_explicit_value_beats_the_gpu_preset():
    scn = resolve("h100", ["network.inter_node.bandwidth=400e9", "gpu=a100"])
    assert scn["network.inter_node.bandwidth"] == 400e9
    assert scn["hardware.sms"] == hardware.gpu_values("a100")["hardware.sms"]


def test_every_preset_resolves_the_papers_sixteen_and_four_more():
    from dmlimits.core.scenario import PAPER_PRESETS

    names = preset_names()
    assert set(PAPER_PRESETS) <= set(names)
    assert set(names) - set(PAPER_PRESETS) == {"h200", "b200", "gb200-nvl72", "gtx580"}
    for name in names:
        assert resolve(name).name == name


def test_low_latency_divides_latencies_by_ten():
    base, low = resolve("h100"), resolve("h100-low-latency")
    for key in ("hardware.kernel_latency", "network.latency"):
        assert low[key] == pytest.approx(base[key] / 10)


def test_yaml_file_nested_and_dotted(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\ngpu: a100\nnetwork:\n  inter_node:\n    bandwidth: 2.0e+11\n"
        "training.months: 6\n"
    )
    scn = resolve(str(f))
    assert scn.name == "mine"
    assert scn["network.inter_node.bandwidth"] == 2e11
    assert scn["training.months"] == 6.0
    assert scn["hardware.sms"] == hardware.gpu_values("a100")["hardware.sms"]


def test_overrides_mapping_as_notebooks_receive_it():
    scn = resolve("h100", overrides={"training.months": 6, "batch.law": "none"}, name="x")
    assert scn["training.months"] == 6.0 and scn["batch.law"] == "none" and scn.name == "x"


def test_sets_name_the_scenario():
    assert resolve("h100", ["training.months=6"]).name == "h100+training.months=6.0"


BAD = [
    (["no.such.key=1"], "no.such.key", "unknown key"),
    (["network.inter_node.bandwidth=-5"], "network.inter_node.bandwidth", "got -5"),
    (["network.intra_node.bandwidth=0"], "network.intra_node.bandwidth", "greater than zero"),
    (["network.latency=nan"], "network.latency", "finite"),
    (["hardware.kernel_latency=inf"], "hardware.kernel_latency", "finite"),
    (["training.months=abc"], "training.months", "'abc'"),
    (["training.months=-1"], "training.months", "greater than zero"),
    (["network.node_size=8.5"], "network.node_size", "whole number"),
    (["gpu=h10"], "gpu", "did you mean h100"),
    (["batch.law=sqrt"], "batch.law", "one of default, none, deepseek"),
    (["model.sparse=maybe"], "model.sparse", "true or false"),
    (["hardware.effective_utilization=1.5"], "hardware.effective_utilization", "at most 1"),
    (["hardware.tensor_memory_per_sm=-1"], "hardware.tensor_memory_per_sm", "at least 0"),
    (["hardware.mma_sms=0"], "hardware.mma_sms", "greater than zero"),
    (["hardware.mma_sms=1.5"], "hardware.mma_sms", "whole number"),
    (["training.months"], "training.months", "expected key=value"),
]


@pytest.mark.parametrize(("sets", "key", "hint"), BAD, ids=[b[0][0] for b in BAD])
def test_bad_values_are_refused_with_one_line(sets, key, hint):
    with pytest.raises(ScenarioError) as info:
        resolve("h100", sets)
    message = str(info.value)
    assert key in message and hint in message
    assert "\n" not in message


def test_misspelt_preset(tmp_path):
    with pytest.raises(ScenarioError, match=r"not a preset name.*did you mean h100-sparse"):
        resolve("h100-sparce")


def test_missing_file():
    with pytest.raises(ScenarioError, match=r"^no such file: nowhere/mine\.yaml$"):
        resolve("nowhere/mine.yaml")


def test_unparsable_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpu: [h100\n")
    with pytest.raises(ScenarioError, match="does not parse at line"):
        resolve(str(f))


def test_file_with_a_bad_value_names_the_key(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("network:\n  latency: -1\n")
    with pytest.raises(ScenarioError, match=r"network\.latency: got -1"):
        resolve(str(f))


def test_file_that_is_not_a_mapping(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(ScenarioError, match="expected a mapping"):
        resolve(str(f))


def test_differences():
    a, b = resolve("h100"), resolve("a100")
    diff = b.differences(a)
    assert diff["gpu"] == ("h100", "a100")
    assert "training.months" not in diff


# Every bandwidth, latency and duration the issue names, with every kind of impossible value;
# through --set and through a scenario file, each refused with one line naming key and value.
POSITIVE_KEYS = [
    "hardware.hbm_bandwidth", "hardware.l2_bandwidth", "network.intra_node.bandwidth",
    "network.inter_node.bandwidth", "network.latency", "hardware.kernel_latency",
    "training.months",
]  # fmt: skip
IMPOSSIBLE = ["-1", "0", "nan", "inf", "-inf", "fast"]


@pytest.mark.parametrize("value", IMPOSSIBLE)
@pytest.mark.parametrize("key", POSITIVE_KEYS)
def test_impossible_values_are_refused_naming_key_and_value(key, value, tmp_path):
    with pytest.raises(ScenarioError) as info:
        resolve("h100", [f"{key}={value}"])
    message = str(info.value)
    assert "\n" not in message and key in message and value in message.lower(), message
    head, leaf = key.rsplit(".", 1)
    f = tmp_path / "s.yaml"
    f.write_text(f"{head}:\n  {leaf}: {value if value != 'nan' else '.nan'}\n")
    with pytest.raises(ScenarioError) as info:
        resolve(str(f))
    message = str(info.value)
    assert "\n" not in message and key in message, message


@pytest.mark.parametrize("value", ["8.5", "eight", "0", "-8", "true"])
def test_node_size_must_be_a_positive_whole_number(value):
    with pytest.raises(ScenarioError) as info:
        resolve("h100", [f"network.node_size={value}"])
    message = str(info.value)
    assert "network.node_size" in message and value in message.lower() and "\n" not in message


def test_compared_presets_keep_what_they_are_named_after():
    from dmlimits.core.scenario import PAPER_PRESETS, compared

    mine = resolve("h100", ["gpu=a100", "training.months=6", "network.latency=1e-6"])
    gens = compared(["v100", "h100", "gb200-nvl72"], mine)
    for name, scn in gens.items():
        assert scn["gpu"] == name  # the GPU the curve is named after, not the reader's
        assert scn["hardware.hbm_bandwidth"] == resolve(name)["hardware.hbm_bandwidth"]
        assert scn["training.months"] == 6  # the reader's other assumptions carry
        assert scn["network.latency"] == 1e-6
    assert gens["gb200-nvl72"]["network.node_size"] == resolve("gb200-nvl72")["network.node_size"]
    paper = compared(PAPER_PRESETS, mine)
    # the paper's comparison varies latency (its low-latency presets): each keeps its own
    assert (
        paper["h100-low-latency"]["network.latency"]
        == resolve("h100-low-latency")["network.latency"]
    )
    assert paper["h100"]["network.latency"] == resolve("h100")["network.latency"]
    assert all(s["training.months"] == 6 for s in paper.values())
    # a preset build and a file that names the same GPU compare the same presets
    assert {
        n: s.values
        for n, s in compared(PAPER_PRESETS, resolve("a100", ["training.months=6"])).items()
    } == {
        n: s.values
        for n, s in compared(
            PAPER_PRESETS, resolve("h100", ["gpu=a100", "training.months=6"])
        ).items()
    }
    assert compared(["h100"], resolve("h100"))["h100"].values == resolve("h100").values
    with pytest.raises(TypeError, match="expected a Scenario"):
        compared(["h100"], "h100")

"""The network schematics (dmlimits.book.schematics_network): each is fit to read in the book's
column, plots no data, labels what the cost modules compute, follows a changed scenario or
degree, and has an alt text in words that names what it draws (the chapter's own)."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from dmlimits.book import figures, schematics_network
from dmlimits.book.glue import quantity
from dmlimits.core import scenario as sc
from dmlimits.costs import collectives as co
from dmlimits.costs import tensor_parallel as tpm
from matplotlib.patches import FancyBboxPatch
from matplotlib.text import Text

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def scn():
    return sc.resolve("h100")


def changed(**overrides):
    return sc.resolve("h100", overrides=overrides)


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_text().strip()]


def label_with(fig, needle: str) -> str:
    found = [t for t in texts(fig) if needle in t]
    assert len(found) == 1, (needle, texts(fig))
    return found[0]


def boxes(fig) -> int:
    """The rounded boxes drawn (GPUs, node frames, switches)."""
    return sum(isinstance(p, FancyBboxPatch) for p in fig.axes[0].patches)


DRAWINGS = {
    "ring": lambda scn: schematics_network.ring_allreduce(scn),
    "cluster": lambda scn: schematics_network.cluster_levels(scn),
    "grid": lambda scn: schematics_network.tensor_grid(scn),
}


@pytest.mark.parametrize("name", DRAWINGS)
def test_each_schematic_is_fit_to_read_in_the_column(name, scn):
    fig = DRAWINGS[name](scn)
    assert figures.check_figure(fig) == []
    assert fig.get_size_inches()[0] == pytest.approx(schematics_network.WIDTH)
    (ax,) = fig.axes
    assert not ax.axison and not ax.get_lines(), "a schematic draws patches, not data lines"
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    scale = schematics_network.COLUMN_PX / (
        max(box.width, schematics_network.WIDTH) * figures.DPI
    )  # the page shrinks it so
    for t in fig.findobj(Text):
        if t.get_text().strip():
            assert t.get_fontsize() * scale >= 9, (t.get_text(), t.get_fontsize() * scale)


def test_the_ring_labels_each_phase_with_the_collectives_costs(scn):
    ex = schematics_network.ring_example(scn)
    words = ex["words"]
    intra, inter = co.allreduce_bytes_split(scn, words, ex["p0"], ex["p1"])
    first, between, last = ex["phases"]
    assert first["bytes"] + between["bytes"] + last["bytes"] == pytest.approx(intra + inter)
    level0, level1 = co.allreduce_time_levels(scn, words, ex["p0"], ex["p1"])
    assert first["bandwidth"] + last["bandwidth"] == pytest.approx(level0.bandwidth)
    assert between["bandwidth"] == pytest.approx(level1.bandwidth)
    fig = schematics_network.ring_allreduce(scn)
    label = label_with(fig, "between nodes").replace("\n", " ")
    assert schematics_network.fraction_text(between["fraction"]) in label
    assert schematics_network.si_bytes(between["bytes"]) in label
    assert "InfiniBand" in label and "two latencies" in label


def test_the_ring_follows_its_sizes_and_the_scenario(scn):
    gpus = sum(t.startswith("GPU ") for t in texts(schematics_network.ring_allreduce(scn)))
    fewer = sum(
        t.startswith("GPU ") for t in texts(schematics_network.ring_allreduce(scn, gpus_per_node=2))
    )
    assert (gpus, fewer) == (8, 4)
    three = texts(schematics_network.ring_allreduce(scn, gpus_per_node=2, nodes=3))
    assert sum(t.startswith("node ") for t in three) == 3
    small_node = schematics_network.ring_example(changed(**{"network.node_size": 2}))
    assert small_node["p0"] == 2  # the default example never exceeds the node
    before = label_with(schematics_network.ring_allreduce(scn), "between nodes")
    slower = changed(**{"network.inter_node.bandwidth": 50e9})
    after = label_with(schematics_network.ring_allreduce(slower), "between nodes")
    assert before != after
    later = label_with(
        schematics_network.ring_allreduce(changed(**{"network.latency": 2e-6})), "between nodes"
    )
    assert quantity(4e-6, "s").replace(" ", schematics_network.NBSP) in later.replace("\n", " ")


def test_phase_labels_word_every_case(scn):
    assert schematics_network.latencies_text(0.0, 1e-6) == "no latency"
    assert schematics_network.latencies_text(1e-6, 1e-6).startswith("one latency, ")
    assert schematics_network.latencies_text(3e-6, 1e-6).startswith("three latencies, ")
    alone = schematics_network.ring_example(scn, gpus_per_node=4, nodes=1)["phases"][1]
    assert schematics_network.phase_label(alone, 1e-6).endswith(
        "a single GPU at this level sends nothing"
    )
    free = schematics_network.ring_example(changed(**{"network.topology": "unlimited"}))["phases"][
        0
    ]
    assert "no bandwidth time" in schematics_network.phase_label(free, 1e-6)


def test_the_cluster_follows_the_node_size_bandwidths_and_latency(scn):
    base = schematics_network.cluster_levels(scn)
    smaller = schematics_network.cluster_levels(changed(**{"network.node_size": 4}))
    assert boxes(base) - boxes(smaller) == 2 * 4  # four GPUs fewer in each of two nodes
    assert "node 0: 4 GPUs" in texts(smaller)
    big = texts(schematics_network.cluster_levels(changed(**{"network.node_size": 72})))
    assert "node 0: 72 GPUs" in big and "⋯" in big
    ib = label_with(base, "between nodes")
    assert quantity(scn["network.inter_node.bandwidth"], "byte/s") in ib
    assert quantity(scn["network.latency"], "s") in ib
    faster_ib = changed(**{"network.inter_node.bandwidth": 4e11})
    faster = label_with(schematics_network.cluster_levels(faster_ib), "between nodes")
    assert "400 GB/s per GPU (200 GB/s each way)" in faster
    nv = label_with(
        schematics_network.cluster_levels(changed(**{"network.latency": 2e-6})), "inside a node"
    )
    assert "2 µs a message" in nv
    flat = label_with(
        schematics_network.cluster_levels(changed(**{"network.topology": "flat"})), "between"
    )
    assert flat.startswith("②  NVLink between nodes")


def test_the_grid_labels_what_each_group_sends(scn):
    ex = schematics_network.grid_example(scn)
    m, f = ex["tp_model"], ex["tp_ff"]
    assert (m, f) == tpm.best_split(scn, ex["d_model"], ex["d_ff"], scn["network.node_size"])
    sent = sum(g["pass_bytes"] for g in ex["groups"].values()) * tpm.PASSES
    assert sent == pytest.approx(ex["layer_bytes"])
    model_group = ex["groups"]["model group"]
    assert model_group["words"] == ex["d_ff"] // f and model_group["size"] == m
    label = label_with(schematics_network.tensor_grid(scn), "model group (").replace("\n", " ")
    assert (
        quantity(model_group["pass_bytes"], "byte", 3).replace(" ", schematics_network.NBSP)
        in label
    )


def test_the_grid_follows_its_degrees(scn):
    cells = boxes(schematics_network.tensor_grid(scn))
    assert boxes(schematics_network.tensor_grid(scn, tp_model=4, tp_ff=8)) - cells == 32 - 8
    one_d = [
        t.replace("\n", " ")
        for t in texts(schematics_network.tensor_grid(scn, tp_model=1, tp_ff=8))
    ]
    assert "model group (a column, one GPU): nothing to all-reduce" in one_d
    assert "$d_{\\mathrm{model}}$ unsplit, 12,288" in one_d
    assert any(t.startswith("Forward: the ff group sums") for t in one_d)
    assert any(
        t.startswith("Forward: the model group sums")
        for t in texts(schematics_network.tensor_grid(scn))
    )


def test_alt_texts_name_what_is_drawn_in_words(scn):
    ring = schematics_network.ring_allreduce_alt(scn)
    assert "two nodes of four GPUs" in ring
    assert "three nodes of two GPUs" in schematics_network.ring_allreduce_alt(
        scn, gpus_per_node=2, nodes=3
    )
    assert "eight GPUs" in schematics_network.cluster_levels_alt(scn)
    assert "four GPUs" in schematics_network.cluster_levels_alt(changed(**{"network.node_size": 4}))
    assert "one NVLink domain" in schematics_network.cluster_levels_alt(
        changed(**{"network.topology": "flat"})
    )
    assert "two by four GPUs" in schematics_network.tensor_grid_alt(scn)
    assert "four by eight GPUs" in schematics_network.tensor_grid_alt(scn, tp_model=4, tp_ff=8)
    for alt in (
        ring,
        schematics_network.cluster_levels_alt(scn),
        schematics_network.tensor_grid_alt(scn),
    ):
        assert not re.search(r"\d", alt)


@pytest.mark.parametrize(
    ("chapter", "name", "alt"),
    [
        ("collectives", "fig-collectives-ring", schematics_network.ring_allreduce_alt),
        ("collectives", "fig-collectives-levels", schematics_network.cluster_levels_alt),
        ("tensor_parallel", "fig-tensor-parallel-grid", schematics_network.tensor_grid_alt),
    ],
)
def test_the_chapters_alt_texts_are_the_librarys(chapter, name, alt, scn):
    source = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    found = re.search(rf":name: {name}\n:alt: (.+)\n", source)
    assert found, f"{chapter}.md places no figure {name}"
    assert found.group(1) == alt(scn)


def test_counts_in_words():
    words = {0: "zero", 7: "seven", 21: "twenty-one", 72: "seventy-two", 100: "one hundred",
             256: "two hundred and fifty-six", 4096: "four thousand and ninety-six",
             1024: "one thousand and twenty-four", 65536: "sixty-five thousand five hundred "
             "and thirty-six"}  # fmt: skip
    for n, text in words.items():
        assert schematics_network.in_words(n) == text
    with pytest.raises(ValueError, match="n: got -1"):
        schematics_network.in_words(-1)

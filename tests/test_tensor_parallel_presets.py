"""Tensor parallelism across the scenario presets: the node-first placement of the chapter's
worked example fits every node size, and the chapter's figures are fit to read when a link's
bandwidth is unbounded (zero bandwidth time, no crossover, nothing to draw on a log axis)."""

from __future__ import annotations

import matplotlib
import pytest
from dmlimits.book import figures, tensor_parallel_page
from dmlimits.core import scenario as sc
from dmlimits.costs import tensor_parallel as tpm

matplotlib.use("Agg")

DM, DFF, TOK = 12288, 49152, 2048
H100 = sc.resolve("h100")


@pytest.mark.parametrize(
    ("sets", "split", "levels"),
    [
        ([], (4, 8), (0, (2, 4))),  # the model group in a node, the ff group in the room left
        ([], (2, 16), (0, (4, 4))),
        ([], (8, 4), (0, 1)),  # a node full of model group: the ff group one GPU per node
        (["network.node_size=2"], (4, 8), ((2, 2), 1)),  # the model group split over nodes
        (["network.node_size=72"], (4, 8), (0, 0)),  # the whole group in one node
        (["network.node_size=6"], (4, 8), (0, 1)),  # a node size the group does not divide
        (["network.node_size=1"], (4, 8), (1, 1)),
    ],
)
def test_node_first_levels(sets, split, levels):
    scn = sc.resolve("h100", sets=sets)
    got = tpm.node_first_levels(scn, *split)
    assert got == levels
    t = tpm.tp_comm_time(scn, DM, DFF, TOK, *split, *got)  # accepted: fits the node
    assert t.bandwidth <= tpm.tp_comm_time(scn, DM, DFF, TOK, *split, 1, 1).bandwidth


def test_node_first_keeps_the_worked_example_at_the_defaults():
    m, f = 4, 8
    f_in = H100["network.node_size"] // m
    assert tpm.node_first_levels(H100, m, f) == (0, (f_in, f // f_in))


def test_node_first_levels_errors():
    with pytest.raises(ValueError, match="tp_model: got 0"):
        tpm.node_first_levels(H100, 0, 8)
    with pytest.raises(ValueError, match="scn: got str"):
        tpm.node_first_levels("h100", 4, 8)


@pytest.mark.parametrize("sets", [[], ["network.topology=unlimited"]])
def test_figures_are_fit_to_read_with_unbounded_bandwidth(sets):
    import matplotlib.pyplot as plt

    figures.apply_style()
    scn = sc.resolve("h100", sets=sets)
    page = tensor_parallel_page
    for fig in (page.figure_time_vs_degree(scn, DM, TOK), page.figure_reference_shards(scn)):
        figures.fit_to_read(fig)
        assert figures.check_figure(fig) == []
        labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
        left_out = [label for label in labels if "not drawn" in label or "no crossover" in label]
        assert bool(left_out) == bool(sets)
        plt.close(fig)

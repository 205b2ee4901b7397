"""The summary page's table (one row per parallelism, rendered from each module's SUMMARY) and
its card of rules of thumb (each the number its chapter computes)."""

import numpy as np
import pytest
import sympy as sp
from dmlimits.book import summary
from dmlimits.core import scenario as sc
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import closed_forms, matmul
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm


def test_every_parallelism_has_a_summary_in_the_right_units():
    entries = summary.entries()
    assert [e["module"] for e in entries] == list(summary.MODULES)
    summary.check_units()
    for e in entries:
        assert isinstance(e["overlaps_compute"], bool)
        assert not REGISTRY.unregistered(e["volume"]) and not REGISTRY.unregistered(e["latency"])


def test_markdown_has_a_row_per_parallelism():
    text = summary.markdown()
    table = text.split("\n\n")[0]
    assert table.count("\n") == len(summary.MODULES) + 1
    for e in summary.entries():
        assert text.count(f"<{e['module']}>") == 2  # a table row and its details
        assert e["what_moves"] in text and e["link"] in text
        assert f"$ per {e['volume_per']} |" in text and f"$ per {e['latency_per']} |" in text


def test_a_module_without_summary_is_refused(monkeypatch):
    monkeypatch.setattr(summary, "MODULES", ("matmul",))
    with pytest.raises(ValueError, match=r"dmlimits\.costs\.matmul\.SUMMARY"):
        summary.entries()


def test_the_rules_of_thumb_are_the_chapters_numbers():
    """The summary's card quotes each number from the function its chapter computes it with,
    and a changed assumption changes the card."""
    scn = sc.resolve("h100")
    card = summary.rules_of_thumb(scn)
    assert card["nanobatch"] == matmul.min_nanobatch(scn)
    assert card["tokens_per_replica"] == dpm.compute_ratio(scn, 2, 1.0)
    # At that many tokens per replica the all-reduce takes as long as the arithmetic.
    assert dpm.compute_ratio(scn, 2, card["tokens_per_replica"]) == pytest.approx(1.0)
    assert card["tp_side_nvlink"] == tpm.crossover_shard(scn, 0)
    assert card["tp_side_ib"] == tpm.crossover_shard(scn, 1)
    assert sp.simplify(card["bubble"] - (ppm.n_pp - 1) / (ppm.n_pp - 1 + ppm.n_micro)) == 0
    assert card["alpha"] == closed_forms.implied_alpha(scn)
    wall = closed_forms.values(scn)["t_limit_flop"]
    up = closed_forms.evaluate("latency_wall", scn, np.array([summary.ALPHA_STEP]))[0]
    assert card["wall_factor"] == pytest.approx(up / wall)
    slow_ib = summary.rules_of_thumb(sc.resolve("h100", ["network.inter_node.bandwidth=25e9"]))
    assert slow_ib["tp_side_ib"] > card["tp_side_ib"]
    assert slow_ib["tokens_per_replica"] > card["tokens_per_replica"]
    assert slow_ib["tp_side_nvlink"] == card["tp_side_nvlink"]

"""The summary page's table: one row per parallelism, rendered from each module's SUMMARY."""

import pytest
from dmlimits.book import summary
from dmlimits.core.symbols import REGISTRY


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

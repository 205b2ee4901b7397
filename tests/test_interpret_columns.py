"""The published runs' structured columns (runs.RUN_COLUMNS): interpret reads what a run did
from them, never from a row's free-text ``notes`` or its ``source`` citation."""

from __future__ import annotations

import ast
import inspect

import pytest
from dmlimits.core import published
from dmlimits.measured import memory, runs

#: Every phrase the published rows' notes and sources use for what a run did: a row that says
#: them all, in its notes and its source, must be read as one that says none.
NOISE = (
    "fabric not stated; local batch 7, global batch 9 sequences; full AC, full_recompute, "
    "selective AC, seqpar, seq-parallel, PP schedule Interleaved 1F1B, fp8 all-gather; "
    "torchtitan, Narayanan et al. 2021, Korthikanti et al. 2022, HF Ultra-Scale Playbook"
)
FILES = {"dev": runs.dev_rows, "holdout": runs.holdout_rows, "nemo": runs.nemo_rows}


def _rows():
    return [(name, i, row) for name, rows in FILES.items() for i, row in enumerate(rows())]


def test_no_function_of_runs_reads_the_notes_or_the_source():
    """The only place runs.py names a row's ``notes`` or ``source`` column is as a key of a row
    it writes (normalize's Playbook row, which passes them through for display): no function
    subscripts, gets, searches or compares them."""
    tree = ast.parse(inspect.getsource(runs))
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    named = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in ("notes", "source")
    ]
    assert named, "normalize writes both columns"
    read = [(node.lineno, node.value) for node in named if id(node) not in keys]
    assert not read, f"runs.py reads a row's notes or source at {read}"


@pytest.mark.parametrize("text", ["", NOISE])
def test_the_notes_and_the_source_do_not_change_an_interpretation(text):
    """Every row of the three published-runs files is read the same with its notes and its
    source emptied, or replaced by every phrase they use for what a run did."""
    for name, i, row in _rows():
        assert runs.interpret(dict(row, notes=text, source=text)) == runs.interpret(row), (name, i)


def _first(name, test):
    return next(row for row in FILES[name]() if test(row))


def _tt(row):
    return row["framework"] == "torchtitan"


#: For each column, a row that states it, the value it is changed to, and what then changes.
CHANGES = {
    "framework": (
        _first("dev", lambda r: _tt(r) and int(r["tp"] or 1) > 1),
        "megatron-lm",
        lambda it: (it.config.keeps_gathered_inputs, it.config.selective_policy),
    ),
    "recompute": (_first("dev", lambda r: r["recompute"] == "full"), "selective",
                  lambda it: it.config.recompute),
    "sequence_parallel": (
        _first("dev", lambda r: r["sequence_parallel"] == "true"),
        "",
        lambda it: it.config.sequence_parallel,
    ),
    "interleaved": (_first("dev", lambda r: r["interleaved"] == "true"), "",
                    lambda it: it.config.vpp),
    "local_batch": (
        _first("dev", lambda r: r["local_batch"] and not r["global_batch_seqs"] and not
               r["global_batch_tokens"]),
        "4",
        lambda it: it.config.global_batch_tokens,
    ),
    "global_batch_seqs": (
        _first("dev", lambda r: r["global_batch_seqs"] and not r["global_batch_tokens"]),
        "1024",
        lambda it: it.config.global_batch_tokens,
    ),
    "fabric_stated": (_first("holdout", lambda r: r["fabric_stated"] == "false"), "",
                      lambda it: it.assumed),
}  # fmt: skip


def test_every_structured_column_is_tested_and_in_a_data_file():
    assert set(CHANGES) == set(runs.RUN_COLUMNS)
    held = set().union(*(set(rows()[0]) for rows in FILES.values()))
    assert set(runs.RUN_COLUMNS) <= held


@pytest.mark.parametrize("column", runs.RUN_COLUMNS)
def test_each_structured_column_is_read(column):
    """A row with one of its structured columns changed is read otherwise."""
    row, value, seen = CHANGES[column]
    assert row[column] != value
    before, after = runs.interpret(row), runs.interpret(dict(row, **{column: value}))
    assert before != after and seen(before) != seen(after)


def test_the_local_batch_gives_torchtitans_pipelined_micro_batches():
    """A torchtitan row with a pipeline and no micro-batch takes its local batch over the
    pipeline degree; with the local batch changed, the micro-batch follows."""
    row = _first("dev", lambda r: _tt(r) and int(r["pp"] or 1) > 1 and not r["interleaved"])
    cfg = runs.interpret(row).config
    assert cfg.mbs == int(row["local_batch"]) // cfg.pp
    doubled = dict(row, local_batch=str(2 * int(row["local_batch"])))
    assert runs.interpret(doubled).config.mbs == 2 * cfg.mbs


def test_a_stated_false_sequence_parallel_overrides_the_frameworks_way():
    row = _first("dev", lambda r: _tt(r) and int(r["tp"] or 1) > 1)
    assert runs.interpret(row).config.sequence_parallel
    it = runs.interpret(dict(row, sequence_parallel="false"))
    assert not it.config.sequence_parallel
    assert not any("the framework's way" in a for a in it.assumed)


def test_the_playbooks_rows_are_nanotrons():
    """normalize gives the Ultra-Scale Playbook's benchmark rows nanotron as their framework,
    which takes the Playbook's fitted activation factor."""
    row = published.data_rows("hf_ultrascale_benchmarks.csv")[1]
    assert runs.normalize(row)[0]["framework"] == "nanotron"
    assert runs.interpret(row).config.activation_factor == memory.PLAYBOOK_ACTIVATION_FACTOR


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("framework", "megatron",
         "column framework must be one of megatron-lm, megatron-deepspeed, torchtitan"),
        ("recompute", "some", "column recompute must be one of none, selective, full or empty"),
        ("sequence_parallel", "yes", "column sequence_parallel must be true or false"),
        ("interleaved", "1", "column interleaved must be true or false"),
        ("fabric_stated", "no", "column fabric_stated must be true or false"),
        ("local_batch", "2.5", "column local_batch must be a whole number"),
        ("global_batch_seqs", "1.5", "column global_batch_seqs must be a whole number"),
    ],
)
def test_a_bad_structured_value_is_refused(column, value, message):
    row = dict(runs.dev_rows()[0], **{column: value})
    with pytest.raises(ValueError, match=message):
        runs.interpret(row)


def test_the_columns_agree_with_the_rows_layout_and_metric():
    """Every row names its framework; a global batch in sequences is the one in tokens over the
    sequence length, a local batch the global one over the data-parallel ranks; a metric that
    names a recomputation or sequence parallelism agrees with the columns."""
    for name, i, row in _rows():
        where = (name, i)
        assert row["framework"] in runs.FRAMEWORKS, where
        seqs, tokens = row.get("global_batch_seqs"), row["global_batch_tokens"]
        if seqs and tokens:
            assert int(seqs) * int(row["seq_len"]) == float(tokens), where
        if seqs and row.get("local_batch"):
            assert int(row["local_batch"]) * int(row["dp"] or 1) == int(seqs), where
        if "full_recompute" in row["metric"]:
            assert row["recompute"] == "full", where
        if "seqpar_selective" in row["metric"]:
            assert (row["recompute"], row["sequence_parallel"]) == ("selective", "true"), where

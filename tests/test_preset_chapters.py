"""Chapters for the scenario presets whose books once stopped: each is executed for that preset
in real kernels and must finish with every value glued and nothing written to stderr.

A preset may take the model where a chapter's first wording assumed it never goes: unbounded
bandwidth between nodes (no critical compute, no bandwidth time, every data-parallel degree's
all-reduce one curve), or a batch law under which the sweep never reaches the latency wall.
The chapters say what happens there instead (tests of each wording are beside its module's
tests); this runs them whole, as a reader's build would.  The build caches executions by
source and library, so after a book of the same preset has been built these are copies of what
executing the current sources gave."""

from __future__ import annotations

import nbformat
import pytest
from conftest import ROOT
from dmlimits.build import engine as build
from dmlimits.core import scenario as sc


@pytest.mark.slow
@pytest.mark.parametrize(
    ("preset", "chapters"),
    [
        ("h100-infinite-network-low-latency-sparse",
         ["notebooks/closed_forms", "notebooks/data_parallel", "notebooks/expert_parallel"]),
        ("gb200-nvl72", ["notebooks/data_parallel"]),
        ("h100-infinite-network-low-latency", ["notebooks/closed_forms"]),  # an infinite limit
        ("gtx580", ["notebooks/expert_parallel"]),  # clusters beyond int64, under a token a GPU
    ],
)  # fmt: skip
def test_the_chapters_finish_for_the_preset(tmp_path, preset, chapters):
    scn = sc.resolve(preset)
    stage = tmp_path / "stage"
    build.execute_notebooks(ROOT, stage, chapters, build.notebook_parameters(scn), 2, scn)
    for name in chapters:
        nb = nbformat.read(stage / f"{name}.ipynb", as_version=4)
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, (name, errors[:1])
        # Nor a warning: a hidden cell's RuntimeWarning was a number the chapter did not check.
        assert build.stream_texts(nb, "stderr") == (), name

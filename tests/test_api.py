"""The public API (``dmlimits/__init__.py``) and the plumbing the caches share."""

import subprocess
import sys

import dmlimits
import pytest
from dmlimits.core import plumbing


@pytest.mark.parametrize("name", sorted(dmlimits.EXPORTS))
def test_every_export_is_the_object_of_its_module(name):
    import importlib

    module = importlib.import_module(dmlimits.EXPORTS[name])
    assert getattr(dmlimits, name) is getattr(module, name)


def test_an_unknown_name_is_refused_with_its_name():
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dmlimits.nothing  # noqa: B018


def test_importing_the_package_imports_no_layer():
    code = "import sys, dmlimits; print(sorted(m for m in sys.modules if m.startswith('dmlimits')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['dmlimits']"


def test_the_docstrings_example_runs():
    """The example of the package's docstring: a longer run moves the limits out, and a
    derivation the library has verifies (an unknown name gives none)."""
    base = dmlimits.headline(dmlimits.resolve("h100"))
    longer = dmlimits.headline(dmlimits.resolve("h100", overrides={"training.months": 6}))
    assert longer["t_limit_flop"] > base["t_limit_flop"] > base["t_crit_flop"] > 0
    dmlimits.derivation_named("collectives-ring-allreduce").verify()
    assert dmlimits.derivation_named("no-such-derivation") is None


def test_cache_folder_reads_its_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("DMLIMITS_TEST_CACHE", raising=False)
    assert plumbing.cache_folder("DMLIMITS_TEST_CACHE", tmp_path) == tmp_path
    assert plumbing.cache_folder("DMLIMITS_TEST_CACHE") is None
    for off in ("", "off", " OFF "):
        monkeypatch.setenv("DMLIMITS_TEST_CACHE", off)
        assert plumbing.cache_folder("DMLIMITS_TEST_CACHE", tmp_path) is None
    monkeypatch.setenv("DMLIMITS_TEST_CACHE", str(tmp_path / "x"))
    assert plumbing.cache_folder("DMLIMITS_TEST_CACHE", tmp_path) == tmp_path / "x"


def test_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "a" / "b.json"
    plumbing.write_json(path, {"x": 1})
    assert plumbing.read_json(path) == {"x": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.json"]

    def fail(*_):
        raise OSError("disk full")

    monkeypatch.setattr(plumbing.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        plumbing.atomic_write(path, "new")
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.json"]
    assert plumbing.read_json(path) == {"x": 1}  # the old entry is whole


def test_read_json_of_a_cut_file_is_none(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"x": ')
    assert plumbing.read_json(path) is None
    assert plumbing.read_json(None) is None


def test_digest_hashes_each_part_apart():
    assert plumbing.digest(b"ab", b"c") != plumbing.digest(b"a", b"bc")
    assert plumbing.digest("é") == plumbing.digest("é".encode())
    assert len(plumbing.digest()) == 64

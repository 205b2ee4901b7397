"""Each patch of a third party's private API (:mod:`dmlimits.build.patches`) was written against
one version of it: this fails when another is installed, so that the patch is read again against
the new code (and its version here moved) before the pin in requirements.txt moves."""

import importlib.metadata
from pathlib import Path

import pytest
from dmlimits.build import patches


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.name)
def test_each_patch_runs_on_the_version_it_was_written_against(patch):
    installed = importlib.metadata.version(patch.distribution)
    assert installed == patch.version, (
        f"{patch.name} was written against {patch.distribution} {patch.version} and reaches "
        f"{patch.reaches}; {installed} is installed: read the patch against it, then move its "
        "version in dmlimits.build.patches.PATCHES"
    )


def test_every_patch_is_listed_with_its_version():
    """Every function of the module that applies a patch is in PATCHES, and every entry names
    a function of the module."""
    listed = {p.name for p in patches.PATCHES}
    assert all(callable(getattr(patches, name)) for name in listed)
    helpers = {"plugins_read_ahead"}  # calls a listed patch; reaches nothing itself
    applied = {
        name for name, value in vars(patches).items()
        if callable(value) and getattr(value, "__module__", "") == patches.__name__
        and not isinstance(value, type)
    }  # fmt: skip
    assert applied - helpers == listed


def test_the_check_fails_on_another_version():
    wrong = patches.Patch("x", "sphinx", "0.0.1", "nothing")
    with pytest.raises(AssertionError, match=r"written against sphinx 0\.0\.1"):
        test_each_patch_runs_on_the_version_it_was_written_against(wrong)


def test_the_search_script_replaces_what_sphinx_defines():
    """``search.js`` replaces ``Search.htmlToText`` and reads the results' markup
    (``#search-results``, ``p.context``) of this Sphinx's ``searchtools.js``: both are there."""
    import sphinx  # Sphinx loads only where its search script is read

    tools = Path(sphinx.__file__).parent / "themes" / "basic" / "static" / "searchtools.js"
    source = tools.read_text()
    assert "htmlToText: (htmlString, anchor) =>" in source
    assert 'querySelector(\'[role="main"]\')' in source
    assert 'summary.classList.add("context")' in source
    assert 'document.getElementById("search-results")' in source

"""Run Jupyter Book's command line, then leave the process without the interpreter's teardown.

The build makes the HTML in a process of its own (``python -m dmlimits.build.jupyter_book_run
build ...``, the arguments of ``jupyter-book``), so that an interrupted build can stop it.  Once
Sphinx has written the book, that process holds every page's document tree, the API page's
imported library and Sphinx's environment; a normal exit then takes the heap apart object by
object, long work that no reader of the book needs.  Here the command runs as ``jupyter-book``
would run it, its ``atexit`` functions run and its output is flushed, and then the process ends
at once with the command's exit code (:func:`dmlimits.build.kernel_fork.end_now`, as a forked
kernel ends).  Everything the build reads of it is on disk or in its output by then.  For the
same reason the command runs with the cyclic garbage collector off (:func:`collector_off`).

``--jobs N`` before the command's arguments makes Sphinx read and write the pages in ``N``
processes: Jupyter Book's ``build_sphinx`` takes the number, but its command line has no
option for it (:mod:`dmlimits.build.sphinxext` says how the pages are shared out).

``--preload CONFIG [--library]`` starts the process before there is a book to build: it imports
Jupyter Book, Sphinx and the extensions the book's ``_config.yml`` names (with ``--library``,
this library too, which the API page's autodoc imports), then reads the command as one line of
JSON on its standard input, ``{"argv": [...], "cwd": "..."}``, and runs it as above (end of
input: it ends, having run nothing).  The build starts it when the chapters start running, so
that these imports are made while the chapters use both cores rather than after the chapters are
done, when the HTML build would wait for them (:func:`dmlimits.build.engine.execute_notebooks`).
Imported before Sphinx forks its reading processes, the library is not imported again in the
process that reads the API page, the longest to read.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import json
import os
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    """Run ``jupyter-book *argv`` in this process (``--jobs N`` first: Sphinx in ``N``
    processes); return its exit code."""
    if argv[:1] == ["--jobs"]:
        jobs = _jobs(argv[1:2])
        if jobs is None:
            print(
                f"--jobs takes a number of processes, at least 1: got {argv[1:2]}", file=sys.stderr
            )
            return 2
        argv = argv[2:]
        if jobs > 1:
            import jupyter_book.sphinx  # Jupyter Book loads only when the HTML is built

            build = jupyter_book.sphinx.build_sphinx  # the command imports it when it runs
            jupyter_book.sphinx.build_sphinx = functools.partial(build, jobs=jobs)
    # Jupyter Book loads only when the HTML is built
    from jupyter_book.cli.main import main as jupyter_book

    try:
        with collector_off():
            jupyter_book.main(args=argv, prog_name="jupyter-book")
    except SystemExit as exc:  # how click ends: sys.exit with the command's code
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def collector_off():
    """Python's cyclic garbage collector off while the command runs (and in the processes
    Sphinx forks to read and write).  Sphinx's heap grows to hundreds of thousands of
    long-lived objects (its environment, every page's document tree), and each full pass of
    the collector scans them all again.  With it off, the cycles it would have freed stay in
    memory until the process ends, a small share of its peak (``docs/performance.md`` gives
    the time and the memory measured).  Reference counting still frees everything else, and
    the process ends as soon as the command is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _jobs(value: list[str]) -> int | None:
    """The number of processes ``--jobs`` was given, or None when it is not one."""
    try:
        jobs = int(value[0])
    except (IndexError, ValueError):
        return None
    return jobs if jobs >= 1 else None


#: What the extensions' ``setup`` functions import when Sphinx calls them, not when the
#: extension is imported: MyST-NB's Sphinx side (the largest), MyST's and sphinx-design's.
#: Preloaded too, so that the HTML build does not wait for them.
SETUP_IMPORTS = ("myst_nb.sphinx_ext", "myst_parser.sphinx_ext.main", "sphinx_design.extension")


def preload(config: Path, library: bool) -> None:
    """Import what the HTML build of the book configured by ``config`` will import: Jupyter
    Book's command, Sphinx, the extensions of the final configuration and what their ``setup``
    imports (:data:`SETUP_IMPORTS`), and, with ``library``, every module of this library; and
    read pybtex's plugins (:func:`dmlimits.build.patches.plugins_read_ahead`).  An import that
    fails is left for the build to report."""
    from jupyter_book.cli import main as _  # noqa: F401

    # Jupyter Book loads only when the HTML is built
    from jupyter_book.config import get_final_config

    sphinx_config, _meta = get_final_config(
        user_yaml=config,
        cli_config={"latex_individualpages": False},  # what the build command passes
        sourcedir=config.parent,
    )
    for name in ["sphinx.application", *sphinx_config.get("extensions", []), *SETUP_IMPORTS]:
        try:
            importlib.import_module(name)
        except Exception:  # the build imports it again, and reports it
            continue
    try:
        # the build's parent process imports no more of the library than it runs
        from dmlimits.build.patches import plugins_read_ahead

        plugins_read_ahead()
    except Exception:  # the build looks them up again, and reports what fails
        pass
    if library:
        # the build's parent process imports no more of the library than it runs
        from dmlimits.core.derivation import import_library

        import_library()


def _preloaded(argv: list[str]) -> list[str] | None:
    """For ``--preload CONFIG [--library]``: preload, then the command read from standard
    input (its working directory entered), or ``None`` at the end of input."""
    config = Path(argv[1])
    try:
        preload(config, "--library" in argv[2:])
    except Exception:  # only the command's own run reports errors
        pass
    line = sys.stdin.readline()
    if not line.strip():
        return None
    request = json.loads(line)
    os.chdir(request["cwd"])
    return [str(a) for a in request["argv"]]


def run_and_leave(argv: list[str]) -> None:
    """:func:`main`, then end the process at once with its exit code (an exception it raised
    is printed first, exit code 1)."""
    # the build's parent process imports no more of the library than it runs
    from dmlimits.build.kernel_fork import end_now

    code = 1
    try:
        if argv[:1] == ["--preload"] and len(argv) >= 2:
            command = _preloaded(argv)
            if command is None:
                code = 0
                return
            argv = command
        code = main(argv)
    except BaseException:
        traceback.print_exc()
    finally:
        end_now(code)


if __name__ == "__main__":
    run_and_leave(sys.argv[1:])

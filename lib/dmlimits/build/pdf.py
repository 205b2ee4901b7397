"""Build the book's PDF from the executed chapters of the default book, with Sphinx's LaTeX
builder (``jupyter-book build --builder pdflatex``) and XeLaTeX.

Why a build of its own: the chapters are not run again.  The PDF is made from the notebooks
the HTML build executed (``_build/executed``), so the two show the same numbers; ``make pdf``
builds the HTML first when it is missing or older than its sources.

Why XeLaTeX: the prose uses Unicode directly (×, −, ≈, Greek letters); pdfLaTeX would need
each of them declared, XeLaTeX typesets them from an OpenType font (GNU FreeFont, Sphinx's
default for XeLaTeX, Debian's ``fonts-freefont-otf``).

The same rules as the HTML build: Sphinx runs with ``-W -n --keep-going`` (every warning an
error) in a stage folder under ``_build/``, and only a PDF that was written replaces the
previous one at :data:`PDF_NAME`; on any failure the stage is removed and the previous PDF is
left as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from dmlimits.build import engine as build
from dmlimits.core.plumbing import atomic_copy

#: Where the PDF goes, relative to the project's folder.
PDF_NAME = Path("_build") / "pdf" / "data-movement-limits.pdf"

#: The prefix of the PDF build's stage folders under ``_build/`` (not the HTML build's, whose
#: stale stages that build removes).
PDF_STAGE_PREFIX = ".pdf-stage-"

#: What the LaTeX builder shows of an output, best first (MyST-NB's
#: ``nb_mime_priority_overrides``, which prefers the lowest rank): LaTeX and static images;
#: HTML, JavaScript and widgets never (LaTeX cannot show them), so that a figure or a table
#: with a static form always appears in the PDF in that form.
LATEX_MIME_PRIORITY = ("text/latex", "application/pdf", "image/svg+xml", "image/png",
                       "image/jpeg", "text/markdown", "text/plain")  # fmt: skip

#: The outputs the LaTeX builder leaves out: only a browser can show them.
LATEX_MIME_NEVER = ("text/html", "application/javascript",
                    "application/vnd.jupyter.widget-view+json")  # fmt: skip

#: LaTeX added to Sphinx's preamble: the roles Sphinx writes (``\DUrole``, a glued value's or
#: a citation's) and hyperref's links made robust, so that a caption may hold a citation
#: (hyperref expands a caption's text, and a fragile command in it stops XeLaTeX).
LATEX_PREAMBLE = r"""\usepackage{etoolbox}
\AtBeginDocument{\robustify\DUrole\robustify\hyperlink}
"""

#: The Debian packages the PDF build needs (the Makefile's ``pdf-deps`` installs them when
#: ``xelatex`` or ``latexmk`` is missing).
TEX_PACKAGES = ("texlive-xetex", "texlive-latex-recommended", "texlive-latex-extra",
                "texlive-fonts-recommended", "latexmk", "fonts-freefont-otf",
                "poppler-utils")  # fmt: skip


#: sphinx-jupyterbook-latex's document class loads ``bbm.sty`` (blackboard bold, for its
#: ``\RR``-style macros, which this book never uses); Debian ships it only in
#: texlive-fonts-extra, about 500 MB.  The PDF build writes this small stand-in (relative to
#: the stage) that maps ``\mathbbm`` to amssymb's ``\mathbb``.
BBM_SHIM = Path("_latex") / "bbm.sty"

BBM_SHIM_TEXT = r"""\NeedsTeXFormat{LaTeX2e}
\ProvidesPackage{bbm}[2026/12/03 stand-in: mathbbm as amssymb's mathbb]
\RequirePackage{amssymb}
\providecommand{\mathbbm}[1]{\mathbb{#1}}
"""


def latex_config(config: dict) -> dict:
    """``config`` (a book's ``_config.yml``) with what the PDF needs: XeLaTeX in
    sphinx-jupyterbook-latex's layout (with :data:`BBM_SHIM`), tables whose columns wrap
    (this module as an extension: :func:`setup`), no xindy (the book has no index; Debian
    packages xindy apart), :data:`LATEX_PREAMBLE`, and :data:`LATEX_MIME_PRIORITY` for the
    LaTeX builder."""
    config = dict(config)
    latex = dict(config.get("latex") or {})
    latex["latex_engine"] = "xelatex"
    latex["use_jupyterbook_latex"] = True  # parts and chapters as the table of contents has them
    config["latex"] = latex
    sphinx = dict(config.get("sphinx") or {})
    settings = dict(sphinx.get("config") or {})
    settings["latex_use_xindy"] = False
    settings["latex_additional_files"] = [
        *settings.get("latex_additional_files", []), str(BBM_SHIM)
    ]
    extensions = list(sphinx.get("extra_extensions") or [])
    sphinx["extra_extensions"] = [*extensions, __name__]  # wrap_table_columns
    settings["nb_mime_priority_overrides"] = [
        *settings.get("nb_mime_priority_overrides", []),
        *(["latex", mime, 10 * (i + 1)] for i, mime in enumerate(LATEX_MIME_PRIORITY)),
        *(["latex", mime, None] for mime in LATEX_MIME_NEVER),
    ]
    elements = dict(settings.get("latex_elements") or {})
    elements["preamble"] = elements.get("preamble", "") + LATEX_PREAMBLE
    settings["latex_elements"] = elements
    sphinx["config"] = settings
    config["sphinx"] = sphinx
    return config


def wrap_table_columns(app: Any, doctree: Any, _docname: str) -> None:
    """For the LaTeX builder, every table's columns as wide as its column specification says
    (Sphinx's ``colwidths-given``), each wrapping its text: without it Sphinx gives a long
    table columns as wide as their longest cell, and a table of sentences runs off the page."""
    if app.builder.format != "latex":
        return
    from docutils import nodes  # only in Sphinx's process

    for table in doctree.findall(nodes.table):
        specs = list(table.findall(nodes.colspec))
        if specs and all(spec.get("colwidth") for spec in specs):
            table["classes"] = [*table.get("classes", []), "colwidths-given"]


def setup(app: Any) -> dict:
    """A Sphinx extension (the PDF build adds it): :func:`wrap_table_columns`."""
    app.connect("doctree-resolved", wrap_table_columns)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def stage_pdf(root: Path, stage: Path, executed: Path) -> None:
    """Copy the book's sources into ``stage``, each chapter as its executed notebook from
    ``executed``, and write the staged ``_config.yml`` for the PDF (:func:`latex_config`)."""
    for item in build.STAGED:
        src = root / item
        if src.is_dir():
            shutil.copytree(src, stage / item)
        elif src.is_file():
            shutil.copy2(src, stage / item)
    build.stage_config(stage)
    for name in build.toc_notebooks(root):
        nb = executed / f"{Path(name).name}.ipynb"
        if not nb.is_file():
            raise build.BuildError(
                f"no executed chapter {nb}: build the HTML book first (make book)"
            )
        target = stage / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, target)
    (stage / BBM_SHIM).parent.mkdir(parents=True, exist_ok=True)
    (stage / BBM_SHIM).write_text(BBM_SHIM_TEXT)
    path = stage / "_config.yml"
    path.write_text(yaml.safe_dump(latex_config(yaml.safe_load(path.read_text())),
                                   sort_keys=False))  # fmt: skip


def run_latex(stage: Path) -> Path:
    """Jupyter Book's LaTeX builder on ``stage`` (``-W -n --keep-going``), then latexmk with
    XeLaTeX; return the PDF written.  Raises :class:`dmlimits.build.engine.BuildError` with
    the warnings (or the log's end) when either fails."""
    args = ["build", str(stage), "--builder", "pdflatex", "--all", "-W", "-n", "--keep-going",
            "--path-output", str(stage)]  # fmt: skip
    print("building the PDF: jupyter-book " + " ".join(args), flush=True)
    cmd = [sys.executable, "-m", "dmlimits.build.jupyter_book_run", *args]
    proc = subprocess.Popen(cmd, cwd=stage, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        log, _ = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    pdf = stage / "_build" / "latex" / PDF_NAME.name
    if proc.returncode != 0 or not pdf.is_file():
        lines = build.ANSI.sub("", log).strip().splitlines()
        warnings = [line for line in lines if "WARNING" in line or "ERROR" in line]
        tex_errors = [line for line in lines if line.startswith("!")]
        shown = warnings + tex_errors or lines[-40:]
        raise build.BuildError("the PDF build failed (warnings are errors):\n" + "\n".join(shown))
    return pdf


def build_pdf(root: Path | None = None) -> Path:
    """Build the default book's PDF into ``root / PDF_NAME`` from ``root/_build/executed``;
    return its path.  Raises :class:`dmlimits.build.engine.BuildError` (the previous PDF
    unchanged) when a tool is missing, a chapter was not executed or the build fails."""
    root = root or build.project_root()
    missing = [tool for tool in ("xelatex", "latexmk") if shutil.which(tool) is None]
    if missing:
        raise build.BuildError(
            f"the PDF needs {' and '.join(missing)}: got none on PATH; expected Debian's "
            f"{' '.join(TEX_PACKAGES)} (make pdf installs them)"
        )
    executed = root / "_build" / "executed"
    work = root / "_build"
    work.mkdir(exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{PDF_STAGE_PREFIX}{os.getpid()}-", dir=work))
    try:
        stage_pdf(root, stage, executed)
        pdf = run_latex(stage)
        final = root / PDF_NAME
        final.parent.mkdir(parents=True, exist_ok=True)
        atomic_copy(pdf, final)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    print(f"built {final}", flush=True)
    return final

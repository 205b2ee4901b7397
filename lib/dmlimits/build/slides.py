"""The course's twelve lectures (``lectures/*.md``, MyST Markdown notebooks) as reveal.js slide
decks that work offline, into ``_build/slides`` with an ``index.html`` that lists them.

Each lecture is executed with papermill in the default scenario (its figures, derivations and
numbers come from the library when it runs) and exported by nbconvert's slides exporter, whose
slide types come from each cell's ``slideshow`` metadata.  nbconvert's own reveal template loads
require.js, reveal.js and MathJax from CDNs; the template beside this module
(``slides_template``) loads reveal.js from a copy vendored from the npm registry at a pinned
version (:data:`REVEAL`, its integrity checked as :mod:`dmlimits.build.vendor` checks
plotly.js's) and MathJax from the copy the book already vendors
(:func:`dmlimits.build.sphinxext.mathjax_source`), so that a deck makes no network request.
``make slides`` runs ``python -m dmlimits.build.slides``.
"""

from __future__ import annotations

import html
import io
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

from dmlimits.build import sphinxext, vendor
from dmlimits.core.assets import Vendored
from dmlimits.core.plumbing import atomic_write

#: reveal.js, MIT licence: the tarball whose ``dist/`` (the script, its style sheets, themes and
#: their fonts) and ``plugin/notes/`` (the speaker view) are copied into every build of the decks.
REVEAL = Vendored(
    package="reveal.js",
    version="4.6.1",
    member="dist/reveal.js",
    integrity=(
        "sha512-1CW0auaXNPmwmvQ7TwpszwVxMi2Xr5cTS3J3EBC/HHgbPF32Dn7aiu/LKWDOGjMbaDwKQiGmfqcoGQ74HUHCMw=="
    ),
    file_name="reveal.js-4.6.1",
)
#: The folders of the reveal.js tarball that a deck uses.
REVEAL_PARTS = ("dist/", "plugin/notes/")
#: The project's root (the lectures are in its ``lectures/`` folder).
ROOT = Path(__file__).resolve().parents[3]
#: The lectures' sources, one MyST Markdown notebook each, in the course's order by name.
LECTURES = ROOT / "lectures"
#: The template folder that replaces nbconvert's CDN scripts with the vendored ones.
TEMPLATE = Path(__file__).resolve().parent / "slides_template"
#: Where the decks are written.
OUT = ROOT / "_build" / "slides"
#: The reveal.js theme of the decks; only its style sheet is copied (others, such as beige and
#: sky, import fonts from Google's servers).
THEME = "white"
#: The size of a slide, in CSS pixels (reveal.js scales it to the window).
SLIDE_SIZE = (1280, 800)


def reveal_folder(folder: Path | None = None) -> Path:
    """The vendored reveal.js folder (:data:`REVEAL_PARTS` of its tarball), downloaded from the
    npm registry, checked against :data:`REVEAL`'s integrity and kept once."""
    target = (folder or vendor.vendor_folder()) / REVEAL.file_name
    if (target / REVEAL.member).is_file():
        return target
    url = vendor.tarball_url(REVEAL)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            tarball = response.read()
    except OSError as e:
        raise OSError(f"{url}: could not download ({e}); expected the npm registry") from e
    vendor.check_integrity(REVEAL, tarball)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("package/")
            if member.isfile() and name.startswith(REVEAL_PARTS):
                data = tar.extractfile(member).read()
                atomic_write(target / name, data)
                (target / name).chmod(0o644)
    return target


def other_themes(folder: str, names: list[str]) -> set[str]:
    """The style sheets of reveal.js's themes other than :data:`THEME` (``shutil.copytree``'s
    ``ignore``), which are not copied."""
    if Path(folder).name != "theme":
        return set()
    return {n for n in names if n.endswith(".css") and n != f"{THEME}.css"}


def lectures(folder: Path = LECTURES) -> list[Path]:
    """The lectures' sources, in order."""
    found = sorted(folder.glob("[0-9][0-9]-*.md"))
    if not found:
        raise ValueError(f"{folder}: no lectures (NN-name.md); expected twelve")
    return found


def title(notebook) -> str:
    """A lecture's title: its first Markdown heading."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError("a lecture without a '# ' heading; expected its title first")


def execute(source: Path, target: Path):
    """``source`` executed by papermill (default scenario) into ``target`` (``.ipynb``)."""
    # Jupyter's packages load only when decks are built, not with the build layer.
    import jupytext  # Jupyter's packages load only when decks are built
    import nbformat  # (as above)
    import papermill  # (as above)

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    raw = target.with_suffix(".source.ipynb")
    nbformat.write(notebook, raw)
    papermill.execute_notebook(str(raw), str(target), kernel_name="python3",
                               cwd=str(ROOT), progress_bar=False)
    raw.unlink()
    return nbformat.read(target, as_version=4)


def export(notebook) -> str:
    """The reveal.js deck of an executed lecture: code hidden where the cell's tags say so
    (``hide-input``), cells tagged ``remove-cell`` dropped, every script local."""
    # nbconvert loads only when decks are built (it is slow to import).
    from nbconvert import SlidesExporter
    from traitlets.config import Config  # (nbconvert's configuration, as above)

    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    config.TagRemovePreprocessor.remove_input_tags = {"hide-input", "remove-input"}
    exporter = SlidesExporter(config=config, template_name="slides_template",
                              extra_template_basedirs=[str(TEMPLATE.parent)])
    exporter.reveal_url_prefix = "reveal.js"
    exporter.reveal_width, exporter.reveal_height = (str(n) for n in SLIDE_SIZE)
    exporter.reveal_theme = THEME
    exporter.font_awesome_url = ""
    exporter.exclude_input_prompt = exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(
        notebook, resources={"dmlimits_mathjax": "mathjax/tex-chtml.js"})
    return body


def index_page(decks: list[tuple[str, str]]) -> str:
    """The page that lists the decks (file name and title each)."""
    items = "\n".join(f'<li><a href="{html.escape(f)}">{html.escape(t)}</a></li>'
                      for f, t in decks)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Data Movement Limits: the course's lectures</title></head>\n"
            "<body><h1>The course's twelve lectures</h1>\n<ol>\n"
            f"{items}\n</ol>\n<p>In a deck: arrow keys move, <kbd>s</kbd> opens the speaker "
            "notes (answers to the questions), <kbd>Esc</kbd> the overview.</p>\n"
            "</body></html>\n")


def build(out: Path = OUT, sources: list[Path] | None = None) -> list[tuple[str, str]]:
    """Every lecture executed and exported into ``out``, with reveal.js, MathJax and an
    ``index.html``; the decks' file names and titles."""
    out.mkdir(parents=True, exist_ok=True)
    executed = out / "_executed"
    executed.mkdir(exist_ok=True)
    shutil.copytree(reveal_folder(), out / "reveal.js", dirs_exist_ok=True, ignore=other_themes)
    shutil.copytree(sphinxext.mathjax_source(), out / "mathjax", dirs_exist_ok=True)
    decks = []
    for source in sources or lectures():
        notebook = execute(source, executed / f"{source.stem}.ipynb")
        name = f"{source.stem}.html"
        atomic_write(out / name, export(notebook).encode())
        decks.append((name, title(notebook)))
        print(f"slides: {name}", file=sys.stderr)
    atomic_write(out / "index.html", index_page(decks).encode())
    return decks


if __name__ == "__main__":
    for name, heading in build():
        print(f"{name}\t{heading}")

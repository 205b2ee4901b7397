"""A small Sphinx extension for the book (listed in ``_config.yml``).

* **MathJax from the book itself.**  The pinned ``django-static-mathjax`` wheel carries MathJax 3;
  after the build its files are copied into the output's ``_static/mathjax`` (``mathjax_path``
  points there), so equations typeset offline and in the browser test, with no CDN.  They are
  copied into the *output*, not the source ``_static``: Jupyter Book would add every script it
  finds there to every page.
* **The interactive figures' scripts from the book itself.**  plotly.js, pinned and fetched from
  the npm registry (:mod:`dmlimits.build.vendor`), and the widgets' own scripts
  (:data:`dmlimits.core.assets.STATIC`) are copied into the output's ``_static`` the same way; only
  the pages that hold a widget link them.
* **No duplicate inline scripts.**  Under Sphinx 7, extensions that register inline scripts when
  the builder starts (sphinx-thebe, sphinx-togglebutton) get them on every page twice; Sphinx
  removes duplicate script *files* but not duplicate inline bodies, and the second
  ``const THEBE_JS_URL`` is a JavaScript error in the reader's console.  Identical inline
  scripts are dropped here.
* **Tables sized to the text column.**  The book's tables hold up to thirteen columns of
  numbers, and the theme sets them in the body's type with wide padding, so most would be wider
  than the column and scroll sideways.  A style sheet of the book's own (:data:`STYLE_SHEET`,
  written into the output's ``_static`` when the builder starts, so that every page links it
  with its checksum) sets them a size smaller with narrower padding, and lets a scenario's name
  in a table break after its hyphens: Sphinx keeps inline code on one line, and
  ``h100-infinite-network-low-latency-sparse`` would make its column 364 pixels wide.
* **Display equations that fit the column.**  MathJax 3 cannot break a display equation, and
  at a phone's width many of the derivations' steps are wider than the column.  A script of
  the book's own (:data:`EQUATIONS_SCRIPT`, written beside the style sheet) sets each such
  equation smaller until it fits, to no less than half the text's size.
* **A way to report a problem on every page.**  While the book names no repository, every
  page's article ends with a link to the errata page (:func:`report_a_problem`); with one, the
  theme's issues button links its tracker.
* **The edition as a tag.**  ``dmlimits_edition`` (set in the staged configuration by
  :func:`dmlimits.build.engine.stage_edition`) is added to Sphinx's tags, for ``{only}`` blocks;
  a reference inside a block the build leaves out is not reported as missing.
* **Search results that read as the pages do.**  A result's summary comes from the page's
  article (not its buttons and list of contents), and a glossary term's result is titled with
  its term (:func:`dmlimits.build.patches.search_results_read_the_article`).
* **Glued values in the body's type.**  MyST-NB's style sheet sets every pasted value bold; the
  book's resets it, so that emphasis is the prose's own.
* **Binder opens the MyST source.**  The build executes each chapter into an ``.ipynb`` beside
  it, so the theme's Binder button would open ``notebooks/NAME.ipynb``, a file the repository
  does not have (it keeps the MyST ``.md``, which Binder opens as a notebook through jupytext).
  The button's path is pointed at the ``.md``.
* **A numbered reference reads its page once.**  Sphinx 7 resolves every ``{numref}`` by
  unpickling the whole doctree of the page it points to, once per reference, and many of the
  book's 127 references point to the same page.  The standard domain here reads each page's
  doctree once per pickled version and shares it between the references, which only look up
  the target's node.
* **An updated search index is the one a build of every page writes.**  Built again from a
  kept state, Sphinx writes only the pages whose sources changed and updates the search index
  it wrote before, with two differences from an index built afresh, both made good here:

  - it drops the rewritten pages from every word's list of pages, then adds them back for the
    words they still have, so a word that only they had is left with an empty list; such
    words are removed;
  - it does not read back the index entries (the glossary's terms, the API's objects) of the
    pages it does not write, and leaves them out; they are read back, and the pages' entries
    are listed in the order of their names, as a build of every page lists them.
* **Pages read in parallel, each page of the API reference alone.**  The build runs Sphinx
  with a process per core (:mod:`dmlimits.build.jupyter_book_run`).  Two extensions Jupyter Book
  loads do not say whether they can be read in parallel (:data:`PARALLEL_READ_SAFE` says why
  they can), and each of the API reference's two pages, the longest to read, gets a process
  of its own (:data:`~dmlimits.build.patches.READ_ALONE`).  The pages are the same as read serially,
  byte for byte.
* **Each page's tree unpickled once for numbering and writing**, not once for each, in the
  writing's main process: the numbering only reads the trees, which the writing then takes over.
* **Bibliography plugins looked up once.**  pybtex scans every installed distribution's entry
  points for its plugins at each citation it resolves; they are read once for the process
  (the HTML process reads them before its command arrives) and each lookup is kept.
* **The API reference documents what is declared.**  An attribute built on first use
  (:mod:`dmlimits.core.lazy`) is documented by its declaration and ``#:`` comment, not built to
  show its value; and autodoc's reading of type comments, which parses every function's
  source, is switched off: the library writes none.
"""

from __future__ import annotations

import shutil
import types
from pathlib import Path

from dmlimits.build import patches, vendor
from dmlimits.core import assets

MATHJAX_PARTS = ("tex-chtml.js", "output", "ui", "a11y", "input")


def mathjax_source() -> Path:
    import mathjax  # Sphinx loads only inside its own build

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _copy_widgets(app, exception) -> None:
    """The interactive figures' files into the output's ``_static``: the pinned plotly.js
    (:mod:`dmlimits.build.vendor`) under ``vendor/`` and the widgets' scripts and style sheet
    under ``dmlimits/``.  Copied into the output, like MathJax, so that only the pages that
    hold a widget load them."""
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    (static / "vendor").mkdir(parents=True, exist_ok=True)
    shutil.copy2(vendor.plotly_file(), static / "vendor" / assets.PLOTLY.file_name)
    (static / "dmlimits").mkdir(parents=True, exist_ok=True)
    for name in assets.STATIC_FILES:
        shutil.copy2(assets.STATIC / name, static / "dmlimits" / name)


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    source = mathjax_source()
    target.mkdir(parents=True, exist_ok=True)
    for part in MATHJAX_PARTS:
        src = source / part
        if src.is_dir():
            shutil.copytree(src, target / part, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target / part)


#: The book's own style sheet (its rules and their reasons in the module's docstring), linked
#: from every page.
STYLE_SHEET = "dmlimits.css"
STYLE = """\
/* dmlimits: tables sized to the text column (see dmlimits.build.sphinxext). */
main table.table { font-size: 0.875em; }
main table.table td, main table.table th { padding-left: 0.3rem; padding-right: 0.3rem; }
main table.table code.literal span.pre { white-space: normal; }
/* A table wider than the column scrolls in its own frame; a shadow at the edge it scrolls
   towards says that more columns are there. */
main .pst-scrollable-table-container {
  background:
    linear-gradient(to right, var(--pst-color-background) 30%, transparent) left / 2rem 100%,
    linear-gradient(to left, var(--pst-color-background) 30%, transparent) right / 2rem 100%,
    radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.25), transparent) left / .8rem 100%,
    radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.25), transparent) right / .8rem 100%;
  background-repeat: no-repeat;
  background-attachment: local, local, scroll, scroll;
}
/* At a phone's width nothing pushes the page sideways: a long name or address breaks where it
   must, an API signature wraps, code and the general index scroll in their own frames. */
main .bd-article a, main .bd-article .citation, main .bd-article td { overflow-wrap: anywhere; }
main dt.sig, main h1, main h2, main h3, main code.literal { overflow-wrap: anywhere; }
main code.literal span.pre, main dt.sig span.pre { white-space: normal; }
main div[class*="highlight"] { max-width: 100%; min-width: 0; }
main div.highlight > pre { overflow-x: auto; min-width: 0; }
main table.indextable { display: block; overflow-x: auto; }
/* A long inline formula (MathJax cannot break one) scrolls in its own box rather than running
   past the paragraph's edge, after the equations' script has set it as small as it may. */
main mjx-container:not([display="true"]) {
  display: inline-block; max-width: 100%; overflow-x: auto; overflow-y: hidden;
  vertical-align: middle;
}
/* Glued values in the body's type: MyST-NB sets pasted text bold, which turned every computed
   number and clause into emphasis. */
span.pasted-text { font-weight: inherit; }
"""
#: The script, linked from every page, that sets a display equation wider than the column a
#: little smaller so that it fits (``lib/dmlimits/static/equations.js`` says how and why).
EQUATIONS_SCRIPT = "dmlimits-equations.js"


def _write_style_sheet(app) -> None:
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / STYLE_SHEET).write_text(STYLE)
    shutil.copy2(assets.STATIC / "equations.js", static / EQUATIONS_SCRIPT)


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    kept = []
    for script in scripts:
        attributes = getattr(script, "attributes", {}) or {}
        # An inline script's filename is None from one registration and "" from the other.
        filename = str(getattr(script, "filename", script) or "")
        key = (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(script)
    # In place: handlers that run later (MathJax's) append to this same list.
    scripts[:] = kept


def binder_opens_myst(app, pagename, templatename, context, doctree) -> None:
    def visit(buttons) -> None:
        for button in buttons or []:
            if isinstance(button, dict):
                url = button.get("url")
                if isinstance(url, str) and "/v2/" in url and "urlpath=" in url:
                    head, _, path = url.partition("urlpath=")
                    if path.endswith(".ipynb"):
                        button["url"] = head + "urlpath=" + path.removesuffix(".ipynb") + ".md"
                visit(button.get("buttons"))  # the theme's launch group

    visit(context.get("header_buttons"))


#: Extensions that declare nothing about reading in parallel (Sphinx then reads serially, and
#: warns, which the strict build turns into an error), and why each is safe:
#:
#: * ``sphinx_multitoc_numbering`` replaces how Sphinx numbers sections across toctrees,
#:   which Sphinx does in the main process once every page is read and merged; it keeps no
#:   state of its own per page.
#: * ``sphinx_jupyterbook_latex``'s transforms act for the LaTeX builder only, and it keeps
#:   nothing in Sphinx's environment.
PARALLEL_READ_SAFE = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def _declare_parallel_read_safe(app, config) -> None:
    for name in PARALLEL_READ_SAFE:
        extension = app.extensions.get(name)
        if extension is not None and extension.parallel_read_safe is None:
            extension.parallel_read_safe = True


def _declared_not_built(module, name, *default):
    """autodoc's ``getattr`` for modules: an attribute built on first use
    (:mod:`dmlimits.core.lazy`) is documented as it is declared, its type and ``#:`` comment,
    without being built: building them all (each module's cost formulas, read from the kept
    formulas or derived, and the summary rows built from them) would make every build's API
    page compute what the chapters compute, and show each value's whole ``repr``."""
    from sphinx.util.inspect import safe_getattr  # Sphinx loads only inside its own build

    # the build's parent process imports no more of the library than it runs
    from dmlimits.core import lazy

    if name in lazy.lazy_names(module):
        if default:
            return default[0]
        raise AttributeError(f"{module.__name__}.{name} is built on first use")
    return safe_getattr(module, name, *default)


#: The page every page links to report a problem while the book names no repository (with one,
#: the theme's issues button points to its tracker instead), as Sphinx names it.
ERRATA_PAGE = "book/errata"

#: The editions' names (:data:`dmlimits.build.engine.EDITIONS`, which the build layer keeps):
#: the Sphinx configuration value ``dmlimits_edition`` is one of them, the instructors' by
#: default, and is added as a tag, so that ``{only} instructors`` holds what the student edition
#: leaves out (a sentence linking an instructors' page).
EDITION_DEFAULT = "instructors"


def _edition_tag(app, config) -> None:
    """Add the edition's tag; the student edition's pages have no download button (its
    sources, which it would offer, hold the solutions and are not copied into that edition).
    Jupyter Book 1 does not pass ``html.use_download_button`` on to the theme, so it is set
    here, in the theme's options."""
    app.tags.add(config.dmlimits_edition)
    if config.dmlimits_edition != EDITION_DEFAULT:
        config.html_theme_options = {**config.html_theme_options, "use_download_button": False}


def _left_out_reference(app, env, node, contnode):
    """A reference inside an ``{only}`` block this build leaves out is not missing: Sphinx
    resolves references before it drops such blocks, and without this the student edition's
    strict build would fail on a sentence, left out, that links an instructors' page."""
    from sphinx import addnodes  # Sphinx loads only inside its own build

    parent = node.parent
    while parent is not None:
        if isinstance(parent, addnodes.only) and not app.tags.eval_condition(parent["expr"]):
            return contnode  # dropped with its block before any page is written
        parent = parent.parent
    return None


def report_a_problem(app, pagename, templatename, context, doctree) -> None:
    """End every page's article with a link to report a problem: to the errata page, which
    says how, while the theme's issues button is off (no repository URL configured)."""
    if app.config.html_theme_options.get("use_issues_button") or "body" not in context:
        return
    if ERRATA_PAGE not in app.env.all_docs:
        return
    href = context["pathto"](ERRATA_PAGE)
    context["body"] += (
        '<p class="dmlimits-report">Found an error on this page? '
        f'<a class="reference internal" href="{href}">Report a problem</a> '
        "(the errata page says how, and lists the corrections made).</p>"
    )


def setup(app):
    patches.search_index_as_built_afresh()
    patches.search_results_read_the_article(app)
    patches.plugins_looked_up_once()
    patches.share_doctrees_while_numbering(app)
    app.add_autodoc_attrgetter(types.ModuleType, _declared_not_built)
    if app.parallel > 1:
        patches.read_alone_in_parallel()
    app.connect("config-inited", _declare_parallel_read_safe)
    app.connect("config-inited", patches.no_type_comments)
    app.add_config_value("dmlimits_edition", EDITION_DEFAULT, "env")
    app.connect("config-inited", _edition_tag)
    app.connect("missing-reference", _left_out_reference)
    app.add_domain(patches.numref_sharing_domain(), override=True)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _copy_widgets)
    app.add_css_file(STYLE_SHEET)
    app.add_js_file(EQUATIONS_SCRIPT, defer="defer")
    app.connect("builder-inited", _write_style_sheet)
    # Early: html-page-context stops at the first handler that returns a template name.
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    # After the theme adds its launch buttons (priority 501).
    app.connect("html-page-context", binder_opens_myst, priority=502)
    app.connect("html-page-context", report_a_problem)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

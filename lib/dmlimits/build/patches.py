"""Patches to the private APIs of Sphinx and pybtex that the book's build applies, each written
against one version (:data:`PATCHES`); ``tests/test_patches.py`` fails when an installed version
is another, so that each patch is read again against the new code before the pins move.

What each does and why it earns its place is said in :mod:`dmlimits.build.sphinxext`, which
applies them; here are the patches alone.
"""

from __future__ import annotations

import functools
import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlimits.core import assets


@dataclass(frozen=True)
class Patch:
    """One patch: the function that applies it, the distribution whose private API it reaches
    and the version it was written against, and the private names it relies on."""

    name: str
    distribution: str
    version: str
    reaches: str


#: Every patch of a third party's private API, with the version it was written against.
PATCHES = (
    Patch("numref_sharing_domain", "sphinx", "7.4.7",
          "StandardDomain._resolve_numref_xref, BuildEnvironment._pickled_doctree_cache"),
    Patch("search_index_as_built_afresh", "sphinx", "7.4.7",
          "IndexBuilder.load, prune and freeze; IndexBuilder._mapping, _title_mapping and "
          "_index_entries"),
    Patch("read_alone_in_parallel", "sphinx", "7.4.7", "sphinx.builders.make_chunks"),
    Patch("share_doctrees_while_numbering", "sphinx", "7.4.7",
          "BuildEnvironment.get_doctree and _write_doc_doctree_cache"),
    Patch("no_type_comments", "sphinx", "7.4.7",
          "EventManager.listeners; sphinx.ext.autodoc.type_comment's listener"),
    Patch("plugins_looked_up_once", "pybtex", "0.26.1", "pybtex.plugin.entry_points"),
    Patch("search_results_read_the_article", "sphinx", "7.4.7",
          "searchtools.js: Search.htmlToText and the markup of #search-results"),
)  # fmt: skip


def numref_sharing_domain():
    """The standard domain, its numbered references resolved against one shared copy of each
    page's doctree (the same pickled bytes give the same tree; a page pickled again is read
    again)."""
    from sphinx.domains.std import StandardDomain  # Sphinx loads only inside its own build

    class NumrefSharingDomain(StandardDomain):
        def _resolve_numref_xref(self, env, *args, **kwargs):
            # On the domain, which Sphinx does not pickle with the environment.
            shared = self.__dict__.setdefault("_shared_doctrees", {})
            own = env.get_doctree

            def get_doctree(docname: str):
                pickled = env._pickled_doctree_cache.get(docname)
                if pickled is None or shared.get(docname, (None,))[0] is not pickled:
                    tree = own(docname)
                    shared[docname] = (env._pickled_doctree_cache[docname], tree)
                return shared[docname][1]

            env.get_doctree = get_doctree  # for this lookup only
            try:
                return super()._resolve_numref_xref(env, *args, **kwargs)
            finally:
                del env.get_doctree

    return NumrefSharingDomain


def search_index_as_built_afresh() -> None:
    """Patch Sphinx's search index so that an updated index equals one built afresh (see the
    module's docstring); applied once per process."""
    from sphinx.search import IndexBuilder  # Sphinx loads only inside its own build

    if getattr(IndexBuilder, "dmlimits_updates_as_built_afresh", False):
        return
    load, prune, freeze = IndexBuilder.load, IndexBuilder.prune, IndexBuilder.freeze

    def load_with_entries(self, stream, format) -> None:
        text = stream.read()
        load(self, io.StringIO(text) if isinstance(text, str) else io.BytesIO(text), format)
        fmt = self.formats[format] if isinstance(format, str) else format
        frozen = fmt.loads(text)
        names = frozen["docnames"]
        entries: dict[str, list[tuple[str, str, str]]] = {}
        for entry, refs in frozen.get("indexentries", {}).items():
            for page, target, main in refs:
                entries.setdefault(names[page], []).append((entry, target, "main" if main else ""))
        for page, listed in entries.items():
            self._index_entries.setdefault(page, listed)

    def prune_and_forget(self, docnames) -> None:
        prune(self, docnames)
        for mapping in (self._mapping, self._title_mapping):
            for word in [w for w, pages in mapping.items() if not pages]:
                del mapping[word]

    def freeze_in_page_order(self):
        ordered = sorted(self._index_entries.items())
        self._index_entries.clear()
        self._index_entries.update(ordered)
        return freeze(self)

    IndexBuilder.load = load_with_entries
    IndexBuilder.prune = prune_and_forget
    IndexBuilder.freeze = freeze_in_page_order
    IndexBuilder.dmlimits_updates_as_built_afresh = True


#: Pages read in a process of their own when Sphinx reads in parallel: the API reference's
#: two pages.  Its autodoc reading (parsing the library's sources for the order of their
#: members and the ``#:`` comments, generating and parsing the entries) takes longer than all
#: the other pages together; on a single page, one process would read it while the other waited.
#: Sphinx's own chunks put each with ten other pages.
READ_ALONE = ("book/api", "book/api_search_and_book")


def no_type_comments(app, config) -> None:
    """Disconnect autodoc's reading of type comments (``# type: (int) -> str``): for each
    function it documents it reads and parses the function's source again, in every build of
    the API page, and the library has no such comment (``tests/test_sphinx_parallel.py``
    checks both)."""
    for listener in list(app.events.listeners.get("autodoc-before-process-signature", [])):
        if getattr(listener.handler, "__module__", "") == "sphinx.ext.autodoc.type_comment":
            app.disconnect(listener.id)


def read_alone_in_parallel() -> None:
    """Make Sphinx's parallel reading give each page of :data:`READ_ALONE` a process of its
    own, and split the other pages among the other processes as Sphinx would; applied once per
    process.  The parallel writing's chunks come from here too: Sphinx writes the first page in
    order of names (the API reference's first) in its main process before it starts, and the
    second page of the reference gets a process of its own.  Chunks without such a page are
    Sphinx's own."""
    import sphinx.builders  # Sphinx loads only inside its own build

    if getattr(sphinx.builders.make_chunks, "dmlimits_read_alone", False):
        return
    make_chunks = sphinx.builders.make_chunks

    def chunks(arguments, nproc, maxbatch=10):
        alone = [[a] for a in arguments if a in READ_ALONE]
        if not alone:
            return make_chunks(arguments, nproc, maxbatch)
        rest = [a for a in arguments if a not in READ_ALONE]
        return alone + (make_chunks(rest, max(1, nproc - len(alone)), maxbatch) if rest else [])

    chunks.dmlimits_read_alone = True
    sphinx.builders.make_chunks = chunks


def plugins_looked_up_once() -> None:
    """Keep pybtex's lookups of its plugins for the process.  sphinxcontrib-bibtex resolves
    every citation through ``pybtex.plugin.find_plugin``, which reads the entry points of every
    installed distribution again each time, in Sphinx's main process, where the pages' references
    are resolved one after another.  The installed distributions do not change during a build; a
    plugin registered while it runs (``register_plugin``) is still found first, as pybtex looks
    there before the entry points.  Every distribution's entry points are read once, whatever the
    selection, so that :func:`plugins_read_ahead` can read them before the build needs them."""
    try:
        import pybtex.plugin as plugin  # Sphinx loads only inside its own build
    except ImportError:  # the book cites nothing without it: nothing to look up
        return
    lookup = plugin.entry_points
    if getattr(lookup, "dmlimits_kept", False):
        return

    @functools.cache
    def everything() -> Any:
        return lookup()  # every distribution's entry points, each file parsed once

    @functools.cache
    def kept(**selection: str) -> tuple:
        return tuple(everything().select(**selection))  # what lookup(**selection) gives

    def entry_points(**selection: str) -> Any:
        # Without a selection, what lookup() gives, as it gives it (Python 3.11's is a
        # dictionary of groups, whose iteration is deprecated).
        return kept(**selection) if selection else everything()

    entry_points.dmlimits_kept = True  # type: ignore[attr-defined]
    plugin.entry_points = entry_points


def plugins_read_ahead() -> None:
    """Read pybtex's plugins' entry points now (``plugins_looked_up_once``): the HTML
    process does it while it waits for its command, rather than in Sphinx's first citation,
    after the chapters are done, when the whole build waits for it."""
    plugins_looked_up_once()
    try:
        import pybtex.plugin as plugin  # Sphinx loads only inside its own build
    except ImportError:
        return
    plugin.entry_points(group="pybtex.style.formatting")  # reads every distribution's


def share_doctrees_while_numbering(app) -> None:
    """Unpickle each page's document tree once between the numbering and the writing.  Once
    the pages are read, Sphinx numbers sections and figures by walking the tree of every page
    (sphinx_multitoc_numbering walks the numbered ones again), each unpickled from disk, then
    unpickles each page it writes once more to resolve and write it.  The walks only read the
    trees: here they share one per page, which is then handed to the writing as Sphinx hands
    it the trees of a serial read (its ``_write_doc_doctree_cache``).  The writing's main
    process, where the pages are resolved one after another, then unpickles no page twice."""
    shared: dict = {}

    def start(app, env) -> list:
        unpickled = env.get_doctree

        def get_doctree(docname: str):
            tree = shared.get(docname)
            if tree is None:
                tree = shared[docname] = unpickled(docname)
            return tree

        env.get_doctree = get_doctree  # for the numbering only: removed at its end
        return []

    def end(app, env) -> list:
        env.__dict__.pop("get_doctree", None)
        for docname, tree in shared.items():
            env._write_doc_doctree_cache.setdefault(docname, tree)
        shared.clear()
        return []

    # The numbering is the only other listener (sphinx.environment.collectors.toctree).
    app.connect("env-get-updated", start, priority=1)
    app.connect("env-get-updated", end, priority=999)


#: The script that makes the search page's summaries come from each page's article and titles a
#: glossary term's result with its term (``lib/dmlimits/static/search.js`` says why), written
#: into the output's ``_static``.
SEARCH_SCRIPT = "dmlimits-search.js"


def search_results_read_the_article(app) -> None:
    """Link :data:`SEARCH_SCRIPT` from every page (it does nothing where Sphinx's search is not
    loaded), written into the output's ``_static`` when the builder starts.  It replaces
    ``Search.htmlToText`` of Sphinx's ``searchtools.js`` and rewrites the results' titles."""
    def write(app) -> None:
        if app.builder.format != "html":
            return
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        shutil.copy2(assets.STATIC / "search.js", static / SEARCH_SCRIPT)

    app.connect("builder-inited", write)
    app.add_js_file(SEARCH_SCRIPT, defer="defer")

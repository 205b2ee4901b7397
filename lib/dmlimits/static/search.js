/* dmlimits: the search page's results read as a reader expects.  Written against Sphinx 7.4.7's
   searchtools.js (dmlimits.build.patches.search_results_read_the_article registers it;
   tests/test_patches.py fails when Sphinx moves).

   - A result's summary is taken from the page's article.  Sphinx reads it from the element
     with role="main", which in this theme also holds the page's buttons and its list of
     contents, so summaries began with ".md" or "Contents" instead of the page's words.
   - A glossary term's result is titled with its term ("Glossary: latency wall") and summarized
     by its definition, so that the term and the glossary page itself are not two results both
     called "Glossary". */
(function () {
  "use strict";
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
  const sphinxs = Search.htmlToText;
  Search.htmlToText = function (htmlString, anchor) {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    const article = page.querySelector("article.bd-article");
    if (!article) return sphinxs(htmlString, anchor);
    article.querySelectorAll(".headerlink, script, style").forEach(function (e) { e.remove(); });
    const target = anchor ? article.querySelector(anchor) : null;
    if (target && target.tagName === "DT") {
      const definition = target.nextElementSibling;
      return target.textContent.trim() + ": " + (definition ? definition.textContent.trim() : "");
    }
    return (target || article).textContent;
  };
  function retitle(results) {
    results.querySelectorAll('li > a[href*="#term-"]').forEach(function (link) {
      const summary = link.parentElement.querySelector("p.context");
      if (link.dataset.dmlimitsTerm || !summary) return;
      const text = summary.textContent;
      const cut = text.indexOf(": ");
      if (cut > 0 && !text.startsWith("...")) {
        link.textContent = link.textContent + ": " + text.slice(0, cut);
        summary.textContent = text.slice(cut + 2);
        link.dataset.dmlimitsTerm = "1";
      }
    });
  }
  function watch() {
    const results = document.getElementById("search-results");
    if (!results) return;
    new MutationObserver(function () { retitle(results); })
      .observe(results, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();

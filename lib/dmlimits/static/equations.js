/* dmlimits: display equations that fit the column (linked from every page by
   dmlimits.build.sphinxext).  MathJax 3 cannot break a display equation across lines, and one
   wider than the text column (a narrow phone's, above all) would scroll inside its own box,
   its end out of sight.  Each such equation is set smaller, just enough to fit, but never
   below MIN_SCALE of the text's size; one that does not fit even then scrolls as before.
   Done again when the window's width changes. */
(function () {
  "use strict";
  const MIN_SCALE = 0.5;
  function fit() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (box) {
      box.style.fontSize = "";
      const math = box.querySelector("mjx-math");
      const room = box.clientWidth;
      if (!math || room <= 0) return;
      const need = math.getBoundingClientRect().width;
      if (need > room + 1) {
        const scale = Math.max(MIN_SCALE, Math.floor(100 * room / need) / 100);
        box.style.fontSize = Math.round(100 * scale) + "%";
        box.dataset.dmlimitsScale = String(scale);
      }
    });
  }
  function whenTypeset(tries) {
    if (!document.querySelector(".math")) return;
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
    } else if (tries < 300) {
      setTimeout(function () { whenTypeset(tries + 1); }, 100);
    }
  }
  let width = window.innerWidth;
  let pending = null;
  window.addEventListener("resize", function () {
    if (window.innerWidth === width) return;
    width = window.innerWidth;
    clearTimeout(pending);
    pending = setTimeout(fit, 150);
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { whenTypeset(0); });
  } else {
    whenTypeset(0);
  }
})();

/* dmlimits: a family of curves and a mark that a reader moves (dmlimits.book.interactive.curves).
   Every number drawn or shown is read from the page's data, computed by the library when the
   chapter executed; this script only looks values up by the controls' positions and formats
   them.  It draws each widget once, however often it is loaded. */
(function () {
  "use strict";
  const SUP = { "-": "\u207b", 0: "\u2070", 1: "\u00b9", 2: "\u00b2", 3: "\u00b3", 4: "\u2074",
                5: "\u2075", 6: "\u2076", 7: "\u2077", 8: "\u2078", 9: "\u2079" };

  /* ``d`` decimals, an exact half rounded to even as Python's format does. */
  function fixed(v, d, group) {
    return new Intl.NumberFormat("en-US", { minimumFractionDigits: d, maximumFractionDigits: d,
      roundingMode: "halfEven", useGrouping: group }).format(v);
  }

  /* A number as the book's prose writes it (dmlimits.book.glue.sci, rule for rule): a whole
     number below ten million as a count with thousands separators (4,096), plain digits
     between a thousandth and a hundred thousand, 2.05 × 10²⁸ beyond; a dash for a gap. */
  function fmt(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return "\u2014";
    digits = digits || 3;
    if (v === 0) return "0";
    if (Number.isInteger(v) && Math.abs(v) < 1e7) return v.toLocaleString("en-US");
    let e = Math.floor(Math.log10(Math.abs(v)));
    if (e >= -3 && e < 5) return fixed(v, Math.max(digits - 1 - e, 0), true);
    let m = Number(fixed(v / Math.pow(10, e), digits - 1, false));
    if (Math.abs(m) >= 10) { m /= 10; e += 1; }  // rounding carried into the next decade
    return fixed(m, digits - 1, false) + " \u00d7 10" +
      String(e).split("").map(c => SUP[c]).join("");
  }

  /* A duration in seconds as milliseconds below a second, as seconds from one. */
  function duration(s) {
    if (s === null || !isFinite(s)) return "\u2014";
    return Math.abs(s) < 1 ? fmt(s * 1e3) + " ms" : fmt(s) + " s";
  }

  function percent(v) {
    if (v === null || !isFinite(v)) return "\u2014";
    const p = (100 * v).toFixed(1);
    return (p === "-0.0" ? "0.0" : p) + "%";
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* A control: a range slider when it has more than five positions, a drop-down otherwise.
     Its value is always an index into the values it was computed at. */
  function control(c, onchange, idPrefix) {
    const wrap = el("label", { class: "dmlimits-control" });
    wrap.appendChild(el("span", { class: "dmlimits-control-label" }, c.label));
    let input;
    if (c.values.length > 5 || c.slider) {
      input = el("input", { type: "range", min: 0, max: c.values.length - 1, step: 1,
                            value: c.initial, "data-control": c.name, id: idPrefix + c.name });
      const shown = el("output", { class: "dmlimits-control-value" }, c.labels[c.initial]);
      input.addEventListener("input", () => { shown.textContent = c.labels[+input.value]; onchange(); });
      wrap.appendChild(input);
      wrap.appendChild(shown);
    } else {
      input = el("select", { "data-control": c.name, id: idPrefix + c.name });
      c.labels.forEach((label, i) => {
        const o = el("option", { value: i }, label);
        if (i === c.initial) o.selected = true;
        input.appendChild(o);
      });
      input.addEventListener("change", onchange);
      wrap.appendChild(input);
    }
    return [wrap, input];
  }

  function drawCurves(root, spec) {
    const inputs = {};
    const bar = el("div", { class: "dmlimits-controls" });
    const plot = el("div", { class: "dmlimits-plot", role: "img",
                             "aria-label": spec.title + ": " + spec.y.label + " against " + spec.x.label });
    const readout = el("div", { class: "dmlimits-readout", "aria-live": "polite" });
    root.appendChild(el("div", { class: "dmlimits-title" }, spec.title));
    root.appendChild(bar);
    root.appendChild(plot);
    root.appendChild(readout);
    const redraw = () => {
      const pos = {};
      for (const c of spec.controls) pos[c.name] = +inputs[c.name].value;
      const key = spec.controls.filter(c => c.name !== spec.x.control).map(c => pos[c.name]).join(",");
      const lines = spec.series[key];
      if (!lines) {  // curves() checks every position is there; say so if one is not
        readout.textContent = "No values were computed for this position of the controls.";
        return;
      }
      const xc = spec.controls.find(c => c.name === spec.x.control);
      const xi = pos[xc.name], xv = xc.values[xi];
      const unit = spec.y.unit ? " " + spec.y.unit : "";
      const show = v => spec.y.percent ? percent(v) : fmt(v) + (v === null ? "" : unit);
      const traces = lines.map((s, i) => ({ x: s.x, y: s.y, name: s.name, mode: "lines",
                                            type: "scatter", line: { width: 2 },
                                            legendgroup: String(i) }));
      lines.forEach((s, i) => traces.push({ x: [xv], y: [s.y[xi]], mode: "markers", type: "scatter",
        showlegend: false, legendgroup: String(i), marker: { size: 9, color: "black" },
        hovertemplate: s.name + ": " + show(s.y[xi]) + "<extra></extra>" }));
      const layout = {
        margin: { l: 60, r: 10, t: 10, b: 50 }, height: 340,
        xaxis: { title: { text: spec.x.label }, type: spec.x.log ? "log" : "linear",
                 exponentformat: "power" },
        yaxis: { title: { text: spec.y.label }, type: spec.y.log ? "log" : "linear",
                 tickformat: spec.y.percent ? ".0%" : "", exponentformat: "power" },
        legend: { orientation: "h", y: -0.25 }, showlegend: lines.length > 1,
      };
      window.Plotly.react(plot, traces, layout, { displayModeBar: false, responsive: true });
      readout.innerHTML = "";
      readout.appendChild(el("span", { class: "dmlimits-readout-x" }, xc.label + " " + xc.labels[xi] + ": "));
      lines.forEach((s, i) => {
        const item = el("span", { class: "dmlimits-readout-item", "data-series": s.name,
                                  "data-value": s.y[xi] === null ? "" : String(s.y[xi]) },
                        (i ? "; " : "") + s.name + " " + show(s.y[xi]));
        readout.appendChild(item);
      });
      root.dataset.drawn = String(+(root.dataset.drawn || 0) + 1);
    };
    for (const c of spec.controls) {
      const [wrap, input] = control(c, redraw, root.id + "-");
      inputs[c.name] = input;
      bar.appendChild(wrap);
    }
    redraw();
  }

  function start() {
    if (!window.Plotly) return;
    document.querySelectorAll(".dmlimits-curves").forEach(root => {
      if (root.dataset.ready) return;
      root.dataset.ready = "1";
      const spec = JSON.parse(document.getElementById(root.id + "-data").textContent);
      drawCurves(root, spec);
    });
  }

  window.dmlimitsWidgets = { fmt: fmt, percent: percent, duration: duration, el: el,
                            control: control };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

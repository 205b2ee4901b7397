/* dmlimits: the explorer page (dmlimits.book.explorer).  The page's data holds every setting
   the build swept: for each, the sweep's columns, the headline numbers and the scenario to take
   home.  This script maps the controls' positions to a setting, draws what was computed for it
   and says when a position was not swept.  No value is computed here. */
(function () {
  "use strict";

  function start() {
    const W = window.dmlimitsWidgets;
    if (!window.Plotly || !W) return;
    document.querySelectorAll(".dmlimits-explorer").forEach(root => {
      if (root.dataset.ready) return;
      root.dataset.ready = "1";
      build(root, JSON.parse(document.getElementById(root.id + "-data").textContent), W);
    });
  }

  function build(root, D, W) {
    const el = W.el, fmt = W.fmt;
    const byName = {};
    D.gpus.forEach(g => { byName[g.name] = g; });
    // The picked compute is kept as a compute, not as an index: grids differ between settings
    // (a sparse model's is not a dense one's), and the nearest grid point is looked up again.
    const state = { gpu: D.initial_gpu, pos: byName[D.initial_gpu].home.slice(),
                    pickFlop: D.initial_compute };

    const top = el("div", { class: "dmlimits-controls" });
    const gpuLabel = el("label", { class: "dmlimits-control" });
    gpuLabel.appendChild(el("span", { class: "dmlimits-control-label" }, "GPU"));
    const gpuSelect = el("select", { id: root.id + "-gpu", "data-control": "gpu" });
    D.gpus.forEach(g => {
      const o = el("option", { value: g.name }, g.label);
      if (g.name === state.gpu) o.selected = true;
      gpuSelect.appendChild(o);
    });
    gpuLabel.appendChild(gpuSelect);
    top.appendChild(gpuLabel);
    const reset = el("button", { type: "button", id: root.id + "-reset", class: "dmlimits-button" },
                     "back to this book's values for the GPU");
    top.appendChild(reset);
    const controls = el("div", { class: "dmlimits-controls" });
    const status = el("p", { class: "dmlimits-status", id: root.id + "-status", "aria-live": "polite" });
    const plot = el("div", { class: "dmlimits-plot", id: root.id + "-plot", role: "img",
      "aria-label": "Utilization against training compute for the chosen setting, with the " +
                    "paper's H100 curve and the limits marked" });
    const numbers = el("table", { class: "dmlimits-numbers", id: root.id + "-numbers" });
    const pickWrap = el("div", { class: "dmlimits-controls" });
    const config = el("table", { class: "dmlimits-numbers", id: root.id + "-config" });
    const bar = el("div", { class: "dmlimits-plot dmlimits-bar", id: root.id + "-step", role: "img",
      "aria-label": "Where the step's time goes at the picked compute: matmuls and each loss" });
    const home = el("details", { class: "dmlimits-take-home" });
    home.appendChild(el("summary", {}, "Take this setting home: its scenario and the commands"));
    home.appendChild(el("p", {}, "Save the scenario as explorer.yaml; the first command builds " +
      "the whole book for it, the second prints its headline numbers."));
    const yamlPre = el("pre", { id: root.id + "-yaml" });
    const cmdPre = el("pre", { id: root.id + "-commands" });
    home.appendChild(yamlPre);
    home.appendChild(cmdPre);
    [top, controls, status, plot, el("p", { class: "dmlimits-title" }, "The limits"), numbers,
     el("p", { class: "dmlimits-title" }, "The best configuration at one compute"), pickWrap, config, bar, home]
      .forEach(x => root.appendChild(x));

    function drawControls() {
      controls.innerHTML = "";
      byName[state.gpu].controls.forEach((c, i) => {
        const spec = { name: c.key, label: c.label, values: c.labels, labels: c.labels,
                       initial: state.pos[i], slider: c.slider };
        const [wrap, input] = W.control(spec, () => { state.pos[i] = +input.value; redraw(); },
                                        root.id + "-");
        controls.appendChild(wrap);
      });
    }

    const pickInput = el("input", { type: "range", min: 0, max: 0, step: 1, value: 0,
                                    id: root.id + "-pick", "data-control": "compute" });
    const pickShown = el("output", { class: "dmlimits-control-value", id: root.id + "-pick-value" });
    const pickLabel = el("label", { class: "dmlimits-control" });
    pickLabel.appendChild(el("span", { class: "dmlimits-control-label" }, "training compute"));
    pickLabel.appendChild(pickInput);
    pickLabel.appendChild(pickShown);
    pickWrap.appendChild(pickLabel);
    let shownFlop = [];
    pickInput.addEventListener("input", () => { state.pickFlop = shownFlop[+pickInput.value]; redraw(); });

    function setting() {
      const g = byName[state.gpu];
      const id = state.gpu + ":" + state.pos.join(",");
      return { id: id, r: D.results[id], g: g };
    }

    // The book's own assumptions (the base's sets), then each moved control's set in its place.
    function offGridCommand(g) {
      const sets = Object.assign({}, g.base_sets);
      g.controls.forEach((c, i) => { if (state.pos[i] !== g.home[i]) sets[c.key] = c.sets[state.pos[i]]; });
      return "python -m dmlimits build --scenario " + state.gpu +
        Object.values(sets).map(x => " --set " + x).join("");
    }

    function row(table, cells, attrs) {
      const tr = el("tr", attrs || {});
      cells.forEach((c, i) => tr.appendChild(el(i ? "td" : "th", {}, c)));
      table.appendChild(tr);
      return tr;
    }

    function redraw() {
      const { id, r, g } = setting();
      root.dataset.setting = id;
      numbers.innerHTML = "";
      config.innerHTML = "";
      if (!r) {
        status.className = "dmlimits-status dmlimits-off-grid";
        status.textContent = "Off the grid: the build swept each control alone" +
          (g.pair_text ? " and " + g.pair_text + " together" : "") +
          ", not this combination. Build the book for it with ";
        status.appendChild(el("code", { class: "dmlimits-command" }, offGridCommand(g)));
        root.dataset.onGrid = "0";
        window.Plotly.purge(plot);
        window.Plotly.purge(bar);
        home.hidden = true;
        pickInput.disabled = true;
        root.dataset.drawn = String(+(root.dataset.drawn || 0) + 1);
        return;
      }
      root.dataset.onGrid = "1";
      status.className = "dmlimits-status";
      status.textContent = "Computed by the library when this book was built.";
      home.hidden = false;
      pickInput.disabled = false;
      const S = {};  // each column is kept once in the page's pool, named here by its index
      for (const [key, index] of Object.entries(r.sweep)) S[key] = D.pool[index];
      const n = S.training_flop.length;
      const feasible = S.feasible.map(f => !!f);
      let k = 0;  // the grid point nearest the picked compute (a lookup, not an interpolation)
      const c0 = state.pickFlop;
      S.training_flop.forEach((x, i) => {
        if (Math.abs(Math.log(x / c0)) < Math.abs(Math.log(S.training_flop[k] / c0))) k = i;
      });
      shownFlop = S.training_flop;
      pickInput.max = n - 1;
      pickInput.value = k;
      pickShown.textContent = fmt(S.training_flop[k]) + " FLOP";

      const xs = [], ys = [];
      S.training_flop.forEach((x, i) => { if (feasible[i]) { xs.push(x); ys.push(S.utilization[i]); } });
      const traces = [
        { x: xs, y: ys, name: "this setting", mode: "lines+markers", type: "scatter",
          marker: { size: 4 }, line: { width: 2.5, color: "#1f5fa8" } },
        { x: D.paper.training_flop, y: D.paper.utilization, name: "the paper's H100 curve (digitized)",
          mode: "lines", type: "scatter", line: { dash: "dash", width: 1.5, color: "#888" } },
      ];
      if (feasible[k]) traces.push({ x: [S.training_flop[k]], y: [S.utilization[k]], mode: "markers",
        type: "scatter", name: "picked compute", marker: { size: 11, color: "#c0392b", symbol: "diamond" } });
      const shapes = [], notes = [];
      D.marks.forEach(([key, label], i) => {
        const v = r.headline[key];
        if (v === null) return;
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: v, x1: v, y0: 0, y1: 1,
                      line: { width: 1, dash: "dot", color: "#444" } });
        notes.push({ x: Math.log10(v), y: 1 - 0.09 * i, xref: "x", yref: "paper", text: label,
                     showarrow: false, xanchor: "left", font: { size: 11 } });
      });
      window.Plotly.react(plot, traces, {
        margin: { l: 60, r: 10, t: 10, b: 50 }, height: 380, shapes: shapes, annotations: notes,
        xaxis: { title: { text: "training compute (FLOP)" }, type: "log", exponentformat: "power" },
        yaxis: { title: { text: "utilization" }, tickformat: ".0%", rangemode: "tozero" },
        legend: { orientation: "h", y: -0.22 },
      }, { displayModeBar: false, responsive: true });

      D.headline_labels.forEach(([key, label]) => {
        const v = r.headline[key];
        const tr = row(numbers, [label, v === null ? r.missing[key] : fmt(v) + " FLOP"],
                       { "data-key": key, "data-value": v === null ? "" : String(v) });
        tr.appendChild(el("td", {}, "")).appendChild(el("code", {}, key));
      });

      if (!feasible[k]) {
        row(config, ["this compute", "no configuration trains it within the run's length"]);
        window.Plotly.purge(bar);
      } else {
        const tp = fmt(S.tp_model[k]) + " \u00d7 " + fmt(S.tp_ff[k]);
        const pp = fmt(S.pp[k]) + (S.v[k] > 1 ? " (interleaved " + fmt(S.v[k]) + " times)" : "");
        [["GPUs", fmt(S.n_gpu[k]), "n_gpu"], ["utilization", W.percent(S.utilization[k]), "utilization"],
         ["model", fmt(S.layers[k]) + " layers of width " + fmt(S.d_model[k]), "layers"],
         ["batch", fmt(S.batch_tokens[k]) + " tokens", "batch_tokens"],
         ["data parallel", fmt(S.dp[k]), "dp"], ["tensor parallel (model \u00d7 ff)", tp, "tp_model"],
         ["pipeline stages", pp, "pp"], ["expert parallel", fmt(S.ep[k]), "ep"],
         ["microbatches", fmt(S.m[k]) + (S.zero_bubble[k] ? ", zero bubble" : ""), "m"],
         ["step time", W.duration(S.t_step[k]), "t_step"],
         ["what binds", D.binding_labels[S.binding[k]], "binding"]]
          .forEach(([label, value, key]) => row(config, [label, value], { "data-key": key,
            "data-value": String(S[key][k]) }));
        const parts = [["ideal", D.ideal_label]]
          .concat(Object.entries(D.loss_labels).map(([key, label]) => ["loss_" + key, label]));
        window.Plotly.react(bar, parts.map(([key, label]) => ({
          x: [(key === "ideal" ? S.ideal[k] : S[key][k]) * 1e3], y: ["step"], name: label,
          type: "bar", orientation: "h",
          customdata: [W.duration(key === "ideal" ? S.ideal[k] : S[key][k])],
          hovertemplate: label + ": %{customdata}<extra></extra>" })), {
          barmode: "stack", height: 250, margin: { l: 50, r: 10, t: 90, b: 50 },
          xaxis: { title: { text: "time of one step (ms)" } },
          legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", traceorder: "normal" },
        }, { displayModeBar: false, responsive: true });
      }
      yamlPre.textContent = r.yaml;
      cmdPre.textContent = r.build_command + "\n" + r.headline_command;
      root.dataset.drawn = String(+(root.dataset.drawn || 0) + 1);
    }

    gpuSelect.addEventListener("change", () => {
      state.gpu = gpuSelect.value;
      state.pos = byName[state.gpu].home.slice();
      drawControls();
      redraw();
    });
    reset.addEventListener("click", () => {
      state.pos = byName[state.gpu].home.slice();
      drawControls();
      redraw();
    });
    drawControls();
    redraw();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

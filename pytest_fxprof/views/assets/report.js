(function () {
  "use strict";
  var own = document.currentScript.dataset;
  var SHOWN = Number(own.chartRows), ROWS = Number(own.tableRows);
  var data = JSON.parse(document.getElementById("fxprof-data").textContent);

  function fmtNs(ns) {
    var size = Math.abs(ns), units = [[1, "ns", 0], [1e3, "us", 1], [1e6, "ms", 2]];
    for (var i = 0; i < units.length; i++) {
      var u = units[i], f = Math.pow(10, u[2]);
      if (Math.round(size / u[0] * f) / f < 1000) return (ns / u[0]).toFixed(u[2]) + " " + u[1];
    }
    return (ns / 1e9).toFixed(2) + " s";
  }
  function fmtDecade(k) {
    var units = ["ns", "us", "ms", "s"], u = Math.min(Math.floor(k / 3), units.length - 1);
    return Math.pow(10, k - 3 * u) + " " + units[u];
  }
  function fmtRatio(r) { return r == null ? "" : "x" + r.toFixed(2); }
  function fmtPct(x, d) { return x == null ? "" : (100 * x).toFixed(d) + "%"; }
  function fmtBand(b) { return b == null ? "" : "+" + (100 * b).toFixed(0) + "%"; }
  function fmtRate(f) { return f == null ? "" : (f / 1e9).toFixed(1); }
  function has(n, k) { return n[k] !== undefined && n[k] !== null; }
  function compared(p) { return p.nodes.some(function (n) { return has(n, "verdict"); }); }
  function tone(n) {
    if (!has(n, "verdict")) return "none";
    if (n.verdict === "ok") return n.confirmed === false ? "warn" : "good";  // flagged, then not confirmed
    if (n.verdict === "slower") return n.gates ? "bad" : "warn";
    return "warn";
  }
  function group(n) {
    if (!has(n, "verdict")) return "";
    return n.verdict.indexOf("noisy") >= 0 ? "noisy" : n.verdict;
  }
  function where(n) { return n.module || "<root>"; }

  function tooltip(n) {
    var lines = [n.name, "module " + where(n) + " \u00b7 " + n.op + " " + n.target];
    if (n.shape) lines.push("shape " + n.shape + (n.layout ? " (" + n.layout + ")" : ""));
    if (n.source) lines.push("source " + n.source);
    lines.push("current " + fmtNs(n.current_ns) + ", spread " + fmtPct(n.spread, 0) + ", share " + fmtPct(n.share, 1));
    if (has(n, "baseline_ns")) {
      lines.push("baseline " + fmtNs(n.baseline_ns) + ", expected " + fmtNs(n.baseline_ns * n.divisor) +
        " (divided by " + fmtRatio(n.divisor) + ")");
      lines.push("ratio " + fmtRatio(n.ratio) + ", band " + fmtBand(n.band) + " (" + n.band_source + ")");
      lines.push(n.verdict + ": " + n.reason);
    }
    return lines.join("\n");
  }

  // The chart: one row per node, worst first; a log time axis.
  var W = 1100, LABEL = 260, X0 = 272, X1 = 1010, ROW = 18, TOP = 26, BOTTOM = 6;

  function rank(n) {  // what failed the profile first, then what was warned about, then the rest
    if (n.verdict === "slower") return n.gates ? 0 : 1;
    return tone(n) === "warn" && n.verdict !== "faster" ? 1 : 2;
  }
  // the time a node lost against its baseline (render.at_stake ranks by it, never by the ratio)
  function extra(n) {
    if (!has(n, "ratio") || !has(n, "baseline_ns")) return -Infinity;
    return n.baseline_ns * (n.ratio - 1);
  }

  function worstFirst(cmp) {
    return function (a, b) {
      if (cmp) {
        if (rank(a) !== rank(b)) return rank(a) - rank(b);
        var ea = extra(a), eb = extra(b);
        if (ea !== eb) return eb - ea;
      }
      if (a.current_ns !== b.current_ns) return b.current_ns - a.current_ns;
      return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    };
  }

  function domain(nodes) {
    var lo = Infinity, hi = 0;
    nodes.forEach(function (n) {
      var s = n.spread || 0, c = n.current_ns;
      [c, c * (1 - s / 2), n.baseline_ns, has(n, "baseline_ns") ? n.baseline_ns * n.divisor : 0].forEach(function (v) {
        if (v > 0 && v < lo) lo = v;
      });
      hi = Math.max(hi, c * (1 + s / 2), n.baseline_ns || 0, has(n, "baseline_ns") ? n.baseline_ns * n.divisor : 0);
    });
    if (!(lo < Infinity)) lo = 1;
    lo = Math.max(1, lo);
    hi = Math.max(hi, lo);
    var a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi * 1.05));
    return [a, Math.max(b, a + 1)];
  }

  function drawChart(svg, p) {
    var NS = svg.namespaceURI, cmp = compared(p);
    function el(tag, attrs, parent) {
      var e = document.createElementNS(NS, tag);
      for (var k in attrs) e.setAttribute(k, attrs[k]);
      parent.appendChild(e);
      return e;
    }
    var rows = p.nodes.slice().sort(worstFirst(cmp));
    var d = domain(rows), lo = d[0], hi = d[1];
    function x(ns) {
      var v = ns > 0 ? Math.log10(ns) : lo;
      v = Math.min(Math.max(v, lo), hi);
      return +(X0 + (X1 - X0) * (v - lo) / (hi - lo)).toFixed(1);
    }
    var full = TOP + rows.length * ROW + BOTTOM;
    var frag = document.createDocumentFragment();
    var grid = el("g", {"class": "grid axis"}, frag);
    for (var k = lo; k <= hi; k++) {
      var at = Math.pow(10, k);
      el("line", {x1: x(at), x2: x(at), y1: TOP - 6, y2: full}, grid);
      el("text", {x: x(at), y: TOP - 10, "text-anchor": "middle"}, grid).textContent = fmtDecade(k);
      if (k < hi && hi - lo <= 5) {
        [2, 5].forEach(function (m) {
          el("line", {"class": "minor", x1: x(m * at), x2: x(m * at), y1: TOP, y2: full}, grid);
        });
      }
    }
    el("text", {x: W - 4, y: TOP - 10, "text-anchor": "end"}, grid).textContent = cmp ? "ratio" : "time";
    rows.forEach(function (n, i) {
      var y = TOP + i * ROW, mid = y + ROW / 2, t = tone(n), s = n.spread || 0, c = n.current_ns;
      var g = el("g", {"class": "fxprof-row" + (i >= SHOWN ? " fxprof-extra" : "")}, frag);
      el("title", {}, g).textContent = tooltip(n);
      el("rect", {"class": "hit", x: 0, y: y, width: W, height: ROW}, g);
      var name = n.name.length > 38 ? n.name.slice(0, 37) + "\u2026" : n.name;
      el("text", {x: LABEL, y: mid + 4, "text-anchor": "end"}, g).textContent = name;
      if (has(n, "baseline_ns")) {
        var expected = n.baseline_ns * n.divisor, edge = expected * (1 + n.band);
        el("rect", {"class": "band t-" + t, x: x(expected), y: y + 3,
          width: Math.max(1, x(edge) - x(expected)), height: ROW - 6}, g);
        el("line", {"class": "base", x1: x(n.baseline_ns), x2: x(n.baseline_ns), y1: y + 2, y2: y + ROW - 2}, g);
      }
      if (s > 0) {
        el("line", {"class": "whisker t-" + t, x1: x(c * (1 - s / 2)), x2: x(c * (1 + s / 2)), y1: mid, y2: mid}, g);
      }
      el("circle", {"class": "fxprof-mark t-" + t, "data-key": n.key, cx: x(c), cy: mid, r: 4}, g);
      el("text", {"class": "ratio t-" + t, x: W - 4, y: mid + 4, "text-anchor": "end"}, g).textContent =
        cmp ? fmtRatio(n.ratio) : fmtNs(c);
    });
    svg.appendChild(frag);
    function size(count) {
      var h = TOP + count * ROW + BOTTOM;
      svg.setAttribute("height", h);
      svg.setAttribute("viewBox", "0 0 " + W + " " + h);
    }
    if (rows.length <= SHOWN) {
      size(rows.length);
      return;
    }
    svg.classList.add("collapsed");
    size(SHOWN);
    var button = document.createElement("button");
    button.type = "button";
    button.className = "fxprof-more";
    function label() {
      var open = !svg.classList.contains("collapsed");
      button.textContent = open ? "Show the worst " + SHOWN + " only" : "Show all " + rows.length + " nodes";
    }
    label();
    button.addEventListener("click", function () {
      var collapsed = svg.classList.toggle("collapsed");
      size(collapsed ? SHOWN : rows.length);
      label();
    });
    svg.parentNode.insertAdjacentElement("afterend", button);
  }

  // The node table: sortable by any column, filtered by text and verdict.
  var COLUMNS = [
    {label: "#", num: true, value: function (n, i) { return i; }, text: function (n, i) { return String(i); }},
    {label: "node", value: function (n) { return n.name; }},
    {label: "direction", step: true, value: function (n) { return n.direction || "forward"; }},
    {label: "current", num: true, value: function (n) { return n.current_ns; },
      text: function (n) { return fmtNs(n.current_ns); }},
    {label: "spread", num: true, value: function (n) { return n.spread; },
      text: function (n) { return fmtPct(n.spread, 0); }},
    {label: "baseline", num: true, cmp: true, value: function (n) { return n.baseline_ns; },
      text: function (n) { return has(n, "baseline_ns") ? fmtNs(n.baseline_ns) : ""; }},
    {label: "ratio", num: true, cmp: true, value: function (n) { return n.ratio; },
      text: function (n) { return fmtRatio(n.ratio); }},
    {label: "band", num: true, cmp: true, value: function (n) { return n.band; },
      text: function (n) { return fmtBand(n.band); }},
    {label: "verdict", cmp: true, value: function (n) { return n.verdict || ""; }, badge: true},
    {label: "share", num: true, value: function (n) { return n.share; },
      text: function (n) { return fmtPct(n.share, 1); }},
    {label: "GFLOP/s", num: true, value: function (n) { return n.flops_per_s; },
      text: function (n) { return fmtRate(n.flops_per_s); }},
    {label: "op", value: function (n) { return n.op; }},
    {label: "target", value: function (n) { return n.target; }},
    {label: "module", value: function (n) { return where(n); }},
    {label: "shape", cls: "shape", value: function (n) { return n.shape || ""; }},
    {label: "source", cls: "src", value: function (n) { return n.source || ""; }}
  ];
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function buildTable(host, p) {
    var cmp = compared(p);
    var step = p.nodes.some(function (n) { return n.direction && n.direction !== "forward"; });
    var cols = COLUMNS.filter(function (c) { return (cmp || !c.cmp) && (step || !c.step); });
    var controls = document.createElement("div");
    controls.className = "controls";
    var search = document.createElement("input");
    search.type = "search";
    search.className = "fxprof-filter";
    search.placeholder = "Filter by name, module, target or op";
    search.setAttribute("aria-label", "Filter nodes by name, module, target or op");
    controls.appendChild(search);
    var select = null;
    if (cmp) {
      select = document.createElement("select");
      select.className = "fxprof-verdict";
      select.setAttribute("aria-label", "Show nodes with this verdict");
      ["all", "slower", "faster", "ok", "noisy"].forEach(function (v) {
        var o = document.createElement("option");
        o.value = v;
        o.textContent = v === "all" ? "every verdict" : v;
        select.appendChild(o);
      });
      controls.appendChild(select);
    }
    var count = document.createElement("span");
    count.className = "dim fxprof-count";
    controls.appendChild(count);
    var more = document.createElement("button");
    more.type = "button";
    more.className = "fxprof-all-rows";
    controls.appendChild(more);
    host.appendChild(controls);

    var wrap = document.createElement("div");
    wrap.className = "table-wrap";
    var table = document.createElement("table");
    table.className = "nodes";
    var head = table.createTHead().insertRow();
    var ths = cols.map(function (c) {
      var th = document.createElement("th");
      th.textContent = c.label;
      th.scope = "col";
      if (c.num) th.className = "num";
      th.title = "Sort by " + c.label;
      head.appendChild(th);
      return th;
    });
    var body = document.createElement("tbody");
    table.appendChild(body);
    wrap.appendChild(table);
    host.appendChild(wrap);

    // Rows are made when first shown, and at most ROWS are shown until "show all": a big graph stays quick.
    var items = p.nodes.map(function (n, i) {
      var hay = [n.name, n.module, n.target, n.op].join("\n").toLowerCase();
      return {node: n, index: i, tr: null, hay: hay, group: group(n)};
    });
    function row(it) {
      if (it.tr) return it.tr;
      var n = it.node, tr = document.createElement("tr");
      tr.dataset.key = n.key;
      cols.forEach(function (c) {
        var td = document.createElement("td");
        if (c.num) td.className = "num";
        if (c.cls) td.className = c.cls;
        if (c.badge) {
          if (has(n, "verdict")) {
            var b = document.createElement("span");
            b.className = "badge t-" + tone(n);
            b.textContent = n.verdict;
            td.appendChild(b);
            td.title = n.reason || "";
          }
        } else {
          td.textContent = c.text ? c.text(n, it.index) : c.value(n, it.index);
          if (c.cls === "src") td.title = n.source || "";
        }
        tr.appendChild(td);
      });
      it.tr = tr;
      return tr;
    }

    var all = false;
    function render() {
      var q = search.value.trim().toLowerCase(), v = select ? select.value : "all";
      var matching = items.filter(function (it) {
        return (!q || it.hay.indexOf(q) >= 0) && (v === "all" || it.group === v);
      });
      var shown = all ? matching : matching.slice(0, ROWS);
      var frag = document.createDocumentFragment();
      shown.forEach(function (it) { frag.appendChild(row(it)); });
      body.replaceChildren(frag);
      var total = items.length, text = matching.length + " of " + total + " nodes";
      if (matching.length === total) text = total + " nodes";
      if (shown.length < matching.length) text += ", the first " + shown.length + " shown";
      count.textContent = text;
      more.hidden = matching.length <= ROWS;
      more.textContent = all ? "Show the first " + ROWS + " only" : "Show all " + matching.length;
    }
    more.addEventListener("click", function () { all = !all; render(); });

    var sorted = {col: -1, dir: 1};
    function sortBy(ci) {
      var c = cols[ci];
      sorted.dir = sorted.col === ci ? -sorted.dir : (c.num && c.label !== "#" ? -1 : 1);
      sorted.col = ci;
      var dir = sorted.dir;
      var keyed = items.map(function (it) { return {it: it, v: c.value(it.node, it.index)}; });
      keyed.sort(function (a, b) {
        var va = a.v, vb = b.v;
        var ma = va === undefined || va === null || va === "", mb = vb === undefined || vb === null || vb === "";
        if (ma || mb) return ma === mb ? a.it.index - b.it.index : ma ? 1 : -1;  // missing values last
        var r = c.num ? va - vb : collator.compare(va, vb);
        return r ? dir * r : a.it.index - b.it.index;
      });
      items = keyed.map(function (k) { return k.it; });
      ths.forEach(function (th, i) {
        if (i === ci) th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        else th.removeAttribute("aria-sort");
      });
      render();
    }
    ths.forEach(function (th, ci) { th.addEventListener("click", function () { sortBy(ci); }); });
    search.addEventListener("input", render);
    if (select) select.addEventListener("change", render);
    render();
  }

  var sections = document.querySelectorAll("section.fxprof-profile");
  for (var i = 0; i < sections.length; i++) {
    var p = data.profiles[Number(sections[i].dataset.index)];
    drawChart(sections[i].querySelector("svg.fxprof-chart"), p);
    buildTable(sections[i].querySelector(".fxprof-nodes"), p);
  }
})();

// Small helpers for the dashboard: refresh live panels, draw the charts, keyboard shortcuts.
(function () {
  "use strict";

  // Panels with data-poll are re-fetched every 2 s; a panel holding the keyboard focus is left alone.
  function poll(el) {
    var url = el.getAttribute("data-poll");
    var untilFinished = el.getAttribute("data-poll-until-finished") === "yes";
    var timer = setInterval(function () {
      if (document.hidden || el.contains(document.activeElement)) return;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          el.innerHTML = html;
          if (untilFinished && !el.querySelector("#run-status.running, #run-status.pending")) clearInterval(timer);
        })
        .catch(function () { /* the next tick tries again */ });
    }, 2000);
  }
  document.querySelectorAll("[data-poll]").forEach(poll);

  // "/" focuses the search box, as on most sites.
  document.addEventListener("keydown", function (e) {
    var tag = (e.target.tagName || "").toLowerCase();
    if (e.key === "/" && tag !== "input" && tag !== "textarea" && tag !== "select") {
      var box = document.querySelector("[data-hotkey='/']");
      if (box) { e.preventDefault(); box.focus(); }
    }
  });

  var COLORS = ["#1463ff", "#12805c", "#b25e09", "#c4320a", "#7a5af8", "#0e9384", "#667085"];
  var NS = "http://www.w3.org/2000/svg";

  function draw(svg, series) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = 600, H = 160, L = 34, B = 18, T = 8;
    var all = [];
    series.forEach(function (s) { s.points.forEach(function (p) { all.push(p); }); });
    if (!all.length) { label(svg, W / 2 - 40, H / 2, "no samples yet"); return; }
    var t0 = Math.min.apply(null, all.map(function (p) { return p.t; }));
    var t1 = Math.max.apply(null, all.map(function (p) { return p.t; }));
    var vmax = Math.max(1, Math.max.apply(null, all.map(function (p) { return p.v; })));
    function x(t) { return L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - 6); }
    function y(v) { return T + (1 - v / vmax) * (H - T - B); }
    [0, vmax / 2, vmax].forEach(function (v) {
      var line = document.createElementNS(NS, "line");
      line.setAttribute("x1", L); line.setAttribute("x2", W - 6); line.setAttribute("y1", y(v)); line.setAttribute("y2", y(v));
      line.setAttribute("stroke", "#e3e6eb"); svg.appendChild(line);
      label(svg, 2, y(v) + 3, Math.round(v * 10) / 10);
    });
    label(svg, L, H - 4, Math.max(1, Math.round((t1 - t0) / 60)) + " min ago");
    label(svg, W - 30, H - 4, "now");
    series.forEach(function (s) {
      if (!s.points.length) return;
      var path = document.createElementNS(NS, "polyline");
      path.setAttribute("points", s.points.map(function (p) { return x(p.t).toFixed(1) + "," + y(p.v).toFixed(1); }).join(" "));
      path.setAttribute("fill", "none"); path.setAttribute("stroke", s.color); path.setAttribute("stroke-width", "2");
      svg.appendChild(path);
    });
  }
  function label(svg, x, y, text) {
    var t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.textContent = text; svg.appendChild(t);
  }

  var rate = document.getElementById("chart-rate");
  var queues = document.getElementById("chart-queues");
  var legend = document.getElementById("chart-legend");
  function charts() {
    if (document.hidden) return;
    fetch("/admin/stats.json", { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (data) {
      draw(rate, [{ points: data.documents_per_minute, color: COLORS[0] }]);
      var names = Object.keys(data.queue_depth);
      draw(queues, names.map(function (n, i) { return { points: data.queue_depth[n], color: COLORS[i % COLORS.length] }; }));
      legend.innerHTML = "";
      names.forEach(function (n, i) {
        var span = document.createElement("span"), dot = document.createElement("i");
        dot.style.background = COLORS[i % COLORS.length]; span.appendChild(dot);
        span.appendChild(document.createTextNode(n.replace("headwater.", ""))); legend.appendChild(span);
      });
    }).catch(function () {});
  }
  if (rate && queues) { charts(); setInterval(charts, 5000); }
})();

// memdir link graph: one <canvas>, no DOM node per vertex. A force layout over a spatial
// grid (each node pushes only the nodes in its neighbouring cells), so a step costs about
// O(nodes + edges) and 10k nodes stay interactive. Written for memdir; no dependency.
"use strict";
(function () {
  var canvas = document.getElementById("graph");
  if (!canvas) return;
  var statusEl = document.getElementById("graph-status");
  var ctx = canvas.getContext("2d");
  var palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
  var state = null;
  var view = { x: 0, y: 0, k: 1 };
  var found = -1;
  var started = 0;

  function size() {
    var ratio = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.floor(canvas.clientWidth * ratio));
    canvas.height = Math.max(1, Math.floor(canvas.clientHeight * ratio));
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  }

  function load(bundle) {
    started = performance.now();
    var url = canvas.dataset.src + (bundle ? "?bundle=" + encodeURIComponent(bundle) : "");
    if (statusEl) statusEl.textContent = "loading…";
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) { start(data); })
      .catch(function (e) { if (statusEl) statusEl.textContent = "could not load the graph: " + e; });
  }

  function start(data) {
    var n = data.nodes.length;
    var xs = new Float32Array(n), ys = new Float32Array(n), vx = new Float32Array(n), vy = new Float32Array(n);
    var spread = Math.sqrt(n) * 12 + 20;
    for (var i = 0; i < n; i++) {
      // a sunflower spiral: even, deterministic start positions
      var r = spread * Math.sqrt((i + 0.5) / n), a = i * 2.399963;
      xs[i] = r * Math.cos(a); ys[i] = r * Math.sin(a);
    }
    var e = data.edges, src = new Int32Array(e.length), dst = new Int32Array(e.length);
    for (var j = 0; j < e.length; j++) { src[j] = e[j][0]; dst[j] = e[j][1]; }
    var table = 1;
    while (table < 2 * n) table *= 2;
    var groups = [];
    for (var g = 0; g < palette.length; g++) groups.push([]);
    for (var m = 0; m < n; m++) groups[data.nodes[m].group % palette.length].push(m);
    state = {
      data: data, n: n, xs: xs, ys: ys, vx: vx, vy: vy, src: src, dst: dst, alpha: 1, steps: 0,
      head: new Int32Array(table), next: new Int32Array(n), gx: new Int32Array(n), gy: new Int32Array(n),
      groups: groups.map(function (list) { return Int32Array.from(list); })
    };
    view = { x: canvas.clientWidth / 2, y: canvas.clientHeight / 2, k: Math.min(4, Math.min(canvas.clientWidth, canvas.clientHeight) / (2.2 * spread)) };
    found = -1;
    draw();
    var ms = Math.round(performance.now() - started);
    canvas.dataset.firstRender = String(ms);
    canvas.dataset.nodes = String(n);
    window.memdirGraph = { firstRenderMs: ms, nodes: n, edges: e.length };
    if (statusEl) statusEl.textContent = n + " nodes, " + e.length + " links; first render " + ms + " ms";
    requestAnimationFrame(tick);
  }

  function step() {
    // Repulsion over a hashed grid: the nodes of each cell are chained through typed arrays
    // (head/next), so a step allocates nothing; a hash collision only adds comparisons.
    var s = state, n = s.n, xs = s.xs, ys = s.ys, vx = s.vx, vy = s.vy;
    var cell = 30, mask = s.head.length - 1, head = s.head, next = s.next, gxs = s.gx, gys = s.gy;
    head.fill(-1);
    for (var i = 0; i < n; i++) {
      var gx = Math.floor(xs[i] / cell), gy = Math.floor(ys[i] / cell);
      gxs[i] = gx; gys[i] = gy;
      var h = ((gx * 73856093) ^ (gy * 19349663)) & mask;
      next[i] = head[h]; head[h] = i;
    }
    var reach = cell * cell;
    for (var a = 0; a < n; a++) {
      var ax = xs[a], ay = ys[a];
      for (var dx = -1; dx <= 1; dx++) for (var dy = -1; dy <= 1; dy++) {
        var o = head[(((gxs[a] + dx) * 73856093) ^ ((gys[a] + dy) * 19349663)) & mask];
        while (o !== -1) {
          if (o > a) {
            var ddx = ax - xs[o], ddy = ay - ys[o], d2 = ddx * ddx + ddy * ddy + 0.01;
            if (d2 < reach) {
              var f = 40 / d2;
              vx[a] += ddx * f; vy[a] += ddy * f; vx[o] -= ddx * f; vy[o] -= ddy * f;
            }
          }
          o = next[o];
        }
      }
    }
    for (var j = 0; j < s.src.length; j++) {
      var p = s.src[j], q = s.dst[j], ex = xs[q] - xs[p], ey = ys[q] - ys[p];
      var d = Math.sqrt(ex * ex + ey * ey) + 0.01, pull = (d - 25) / d * 0.05;
      vx[p] += ex * pull; vy[p] += ey * pull; vx[q] -= ex * pull; vy[q] -= ey * pull;
    }
    for (var k = 0; k < n; k++) {
      vx[k] -= xs[k] * 0.0008; vy[k] -= ys[k] * 0.0008;  // a weak pull to the centre
      xs[k] += vx[k] * s.alpha; ys[k] += vy[k] * s.alpha;
      vx[k] *= 0.6; vy[k] *= 0.6;
    }
    s.alpha *= 0.985; s.steps++;
  }

  function fit() {
    var s = state, minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
    for (var i = 0; i < s.n; i++) {
      if (s.xs[i] < minX) minX = s.xs[i]; if (s.xs[i] > maxX) maxX = s.xs[i];
      if (s.ys[i] < minY) minY = s.ys[i]; if (s.ys[i] > maxY) maxY = s.ys[i];
    }
    if (!s.n) return;
    var w = canvas.clientWidth, h = canvas.clientHeight;
    var k = Math.min(4, 0.9 * Math.min(w / Math.max(maxX - minX, 1), h / Math.max(maxY - minY, 1)));
    view = { k: k, x: w / 2 - k * (minX + maxX) / 2, y: h / 2 - k * (minY + maxY) / 2 };
  }

  function tick() {
    if (!state) return;
    if (state.alpha < 0.02) { if (!drag && !state.fitted) { state.fitted = true; fit(); draw(); } return; }
    var t0 = performance.now();
    step();
    draw();
    var spent = performance.now() - t0;  // one layout step and one redraw: the frame cost
    state.frameMs = state.frameMs ? 0.9 * state.frameMs + 0.1 * spent : spent;
    canvas.dataset.frameMs = state.frameMs.toFixed(1);
    requestAnimationFrame(tick);
  }

  function draw() {
    if (!state) return;
    var began = performance.now();
    var s = state, w = canvas.clientWidth, h = canvas.clientHeight;
    ctx.clearRect(0, 0, w, h);
    ctx.save();
    ctx.translate(view.x, view.y); ctx.scale(view.k, view.k);
    ctx.globalAlpha = 0.35;
    ctx.strokeStyle = getComputedStyle(canvas).color || "#888";
    ctx.lineWidth = 1 / view.k;
    ctx.beginPath();
    for (var j = 0; j < s.src.length; j++) {
      ctx.moveTo(s.xs[s.src[j]], s.ys[s.src[j]]); ctx.lineTo(s.xs[s.dst[j]], s.ys[s.dst[j]]);
    }
    ctx.stroke();
    ctx.globalAlpha = 1;
    var r = Math.max(1.5, 3 / view.k), nodes = s.data.nodes;
    for (var g = 0; g < palette.length; g++) {
      var members = s.groups[g];
      if (!members.length) continue;
      ctx.fillStyle = palette[g];
      ctx.beginPath();
      for (var t = 0; t < members.length; t++) {
        var i = members[t];
        ctx.rect(s.xs[i] - r, s.ys[i] - r, 2 * r, 2 * r);
      }
      ctx.fill();
    }
    if (s.n <= 400 || view.k > 2.5) {  // labels once they can be read
      ctx.fillStyle = getComputedStyle(canvas).color || "#000";
      ctx.font = (11 / view.k) + "px system-ui";
      var w0 = -view.x / view.k, h0 = -view.y / view.k, w1 = w0 + w / view.k, h1 = h0 + h / view.k;
      for (var q = 0; q < s.n; q++) {
        if (s.xs[q] < w0 || s.xs[q] > w1 || s.ys[q] < h0 || s.ys[q] > h1) continue;
        ctx.fillText(nodes[q].title, s.xs[q] + 5 / view.k, s.ys[q] + 3 / view.k);
      }
    }
    if (found >= 0) {
      ctx.strokeStyle = "#f0a500"; ctx.lineWidth = 3 / view.k;
      ctx.beginPath(); ctx.arc(s.xs[found], s.ys[found], 10 / view.k, 0, 7); ctx.stroke();
      ctx.fillStyle = getComputedStyle(canvas).color || "#000";
      ctx.font = (13 / view.k) + "px system-ui";
      ctx.fillText(nodes[found].title, s.xs[found] + 12 / view.k, s.ys[found]);
    }
    ctx.restore();
    canvas.dataset.drawMs = (performance.now() - began).toFixed(1);
  }

  function nearest(px, py) {
    if (!state) return -1;
    var x = (px - view.x) / view.k, y = (py - view.y) / view.k, best = -1, bestD = (8 / view.k) * (8 / view.k);
    for (var i = 0; i < state.n; i++) {
      var dx = state.xs[i] - x, dy = state.ys[i] - y, d = dx * dx + dy * dy;
      if (d < bestD) { bestD = d; best = i; }
    }
    return best;
  }

  function open(i) { if (i >= 0) window.location.href = (document.body.dataset.base || "") + "/doc/" + state.data.nodes[i].path.split("/").map(encodeURIComponent).join("/"); }

  var drag = null, moved = false;
  canvas.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, y: ev.clientY }; moved = false; });
  window.addEventListener("mouseup", function (ev) {
    if (drag && !moved) {
      var box = canvas.getBoundingClientRect();
      open(nearest(ev.clientX - box.left, ev.clientY - box.top));
    }
    drag = null;
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) moved = true;
    view.x += dx; view.y += dy; drag = { x: ev.clientX, y: ev.clientY }; draw();
  });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var box = canvas.getBoundingClientRect(), px = ev.clientX - box.left, py = ev.clientY - box.top;
    var f = ev.deltaY < 0 ? 1.15 : 1 / 1.15;
    view.x = px - (px - view.x) * f; view.y = py - (py - view.y) * f; view.k *= f; draw();
  }, { passive: false });
  canvas.addEventListener("keydown", function (ev) {
    var moves = { ArrowLeft: [40, 0], ArrowRight: [-40, 0], ArrowUp: [0, 40], ArrowDown: [0, -40] };
    if (moves[ev.key]) { view.x += moves[ev.key][0]; view.y += moves[ev.key][1]; }
    else if (ev.key === "+" || ev.key === "=") view.k *= 1.2;
    else if (ev.key === "-") view.k /= 1.2;
    else if (ev.key === "Enter") { open(found); return; }
    else return;
    ev.preventDefault(); draw();
  });

  var find = document.getElementById("find");
  if (find) find.addEventListener("input", function () {
    var q = find.value.trim().toLowerCase();
    found = -1;
    if (q && state) {
      var nodes = state.data.nodes;
      for (var i = 0; i < nodes.length; i++) {
        if (nodes[i].title.toLowerCase().indexOf(q) >= 0 || nodes[i].path.toLowerCase().indexOf(q) >= 0) { found = i; break; }
      }
      if (found >= 0) {
        view.x = canvas.clientWidth / 2 - state.xs[found] * view.k;
        view.y = canvas.clientHeight / 2 - state.ys[found] * view.k;
      }
    }
    if (statusEl && q) statusEl.textContent = found >= 0 ? "found: " + state.data.nodes[found].title + " (Enter on the canvas opens it)" : "no match";
    draw();
  });
  if (find) find.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { ev.preventDefault(); open(found); } });
  var bundle = document.getElementById("bundle");
  if (bundle) bundle.addEventListener("change", function () { load(bundle.value); });
  var form = document.getElementById("graph-form");
  if (form) form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  window.addEventListener("resize", function () { size(); draw(); });
  size();
  load("");
})();

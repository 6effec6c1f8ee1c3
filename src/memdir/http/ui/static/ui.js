// memdir web UI: keyboard navigation, work logs on demand, live updates. No framework.
"use strict";
(function () {
  // -- keys: "/" focuses search, "g" then a letter goes to a page, j/k move in lists
  var pending = false;
  function typing(el) {
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable);
  }
  var current = -1;
  function items() {
    var found = document.querySelectorAll("main .list > li a:first-of-type, main .tree a, main .tree summary");
    // only what is shown: a link inside a closed <details> cannot take the focus
    return Array.prototype.filter.call(found, function (el) { return el.getClientRects().length > 0; });
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target) || ev.target.id === "graph") return;
    if (ev.key === "/") {
      var box = document.getElementById("q") || document.getElementById("quick-q");
      if (box) { ev.preventDefault(); box.focus(); box.select(); }
      return;
    }
    if (pending) {
      pending = false;
      var link = document.querySelector('nav a[data-key="' + ev.key + '"]');
      if (link) { ev.preventDefault(); window.location.href = link.getAttribute("href"); }
      return;
    }
    if (ev.key === "g") { pending = true; setTimeout(function () { pending = false; }, 1500); return; }
    if (ev.key === "j" || ev.key === "k") {
      var all = items();
      if (!all.length) return;
      current = Math.max(0, Math.min(all.length - 1, current + (ev.key === "j" ? 1 : -1)));
      all[current].focus();
      ev.preventDefault();
    }
  });

  // -- work logs: fetched when their <details> opens
  document.querySelectorAll("details.worklog").forEach(function (box) {
    box.addEventListener("toggle", function () {
      if (!box.open || box.dataset.loaded) return;
      box.dataset.loaded = "1";
      var pre = box.querySelector("pre");
      fetch(box.dataset.src, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (text) { pre.textContent = text || "(no work log)"; pre.classList.remove("loading"); })
        .catch(function (s) { pre.textContent = "could not load the work log (" + s + ")"; });
    });
  });

  // -- live: new turns and runs from server-sent events
  var live = document.getElementById("live");
  var latest = document.getElementById("latest");
  if ((live || latest) && window.EventSource) {
    var status = document.getElementById("live-status");
    var source = new EventSource(live ? live.dataset.src : (document.body.dataset.base || "") + "/events");
    function add(list, text, href) {
      var li = document.createElement("li");
      li.className = "new";
      if (href) {
        var a = document.createElement("a");
        a.href = href; a.textContent = text; li.appendChild(a);
      } else {
        li.textContent = text;
      }
      var empty = list.querySelector(".empty");
      if (empty) empty.remove();
      list.insertBefore(li, list.firstChild);
    }
    source.addEventListener("hello", function (ev) {
      if (status) status.textContent = "connected: " + JSON.parse(ev.data).turns + " turns so far";
    });
    source.addEventListener("turn", function (ev) {
      var t = JSON.parse(ev.data);
      [live, latest].forEach(function (list) { if (list) add(list, "turn · " + t.title, (document.body.dataset.base || "") + "/turn/" + encodeURIComponent(t.id)); });
    });
    source.addEventListener("run", function (ev) {
      var r = JSON.parse(ev.data);
      if (live) add(live, "run · " + r.verb + " " + r.status + " · " + r.timestamp + " " + r.notes, null);
    });
    source.onerror = function () { if (status) status.textContent = "disconnected; retrying…"; };
  }
})();

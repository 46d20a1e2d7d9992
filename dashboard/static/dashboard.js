// taskbridge dashboard: keeps the #live part of the page current. The
// server pushes change events (server-sent events); on each relevant one
// the script re-reads the same URL with ?partial=1 and swaps the part in.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  var base = document.body.dataset.base;
  if (!live || !base || !window.EventSource) { return; }
  var task = document.body.dataset.task || "";
  var timer = null, busy = false, again = false;

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var u = new URL(window.location.href);
    u.searchParams.set("partial", "1");
    u.searchParams.delete("done");
    fetch(u.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          document.body.dataset.refreshed = String(Date.now());
        }
      })
      .catch(function () {})
      .finally(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
  }
  function schedule() {
    if (timer) { return; }
    timer = setTimeout(function () { timer = null; refresh(); }, 60);
  }
  var src = new EventSource(base + "/events" + (task ? "?task=" + encodeURIComponent(task) : ""));
  src.addEventListener("open", function () { if (state) { state.dataset.state = "on"; } });
  src.addEventListener("error", function () { if (state) { state.dataset.state = "off"; } });
  src.addEventListener("hello", function () { if (state) { state.dataset.state = "on"; } });
  src.addEventListener("refresh", schedule);
  src.addEventListener("task", function (e) {
    if (!task) { schedule(); return; }
    try { if (JSON.parse(e.data).id === task) { schedule(); } } catch (_) {}
  });
  // A task page lists the task's events as they happen (its own stream,
  // resumed after the last event by the browser when it reconnects).
  var list = document.getElementById("events");
  if (task && list) {
    var evs = new EventSource(base + "/tasks/" + encodeURIComponent(task) + "/events");
    evs.addEventListener("open", function () { list.dataset.state = "on"; });
    evs.addEventListener("taskevent", function (e) {
      var ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      var li = document.createElement("li");
      li.className = "e-" + ev.type;
      li.dataset.seq = String(ev.seq);
      var at = document.createElement("span");
      at.className = "at";
      at.textContent = ev.at ? ev.at.slice(11, 19) : "";
      li.appendChild(at);
      li.appendChild(document.createTextNode(ev.line));
      var bottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
      list.appendChild(li);
      while (list.children.length > 500) { list.removeChild(list.firstChild); }
      if (bottom) { list.scrollTop = list.scrollHeight; }
    });
    evs.addEventListener("end", function () { list.dataset.state = "ended"; evs.close(); });
  }
  // The cancel form asks first.
  document.addEventListener("submit", function (e) {
    if (e.target && e.target.id === "cancel-form" && !window.confirm("Cancel this task? Its work is stopped.")) {
      e.preventDefault();
    }
  });
})();

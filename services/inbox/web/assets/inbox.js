// Countersign inbox: live updates over server-sent events and keyboard
// shortcuts. No dependencies; loaded as a file (the page allows no inline
// scripts).
(function () {
  "use strict";

  function typing(e) {
    var t = e.target;
    if (!t || !t.tagName) return false;
    var tag = t.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || t.isContentEditable;
  }

  function parse(html) {
    return new DOMParser().parseFromString(html, "text/html");
  }

  function fetchHTML(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) throw new Error("status " + r.status);
      return r.text();
    });
  }

  // One event stream for the page; handlers get {event_id, kind, status}.
  function subscribe(handler) {
    if (!window.EventSource) return;
    var es = new EventSource("/inbox/events");
    ["requested", "changed", "decided"].forEach(function (kind) {
      es.addEventListener(kind, function (m) {
        try { handler(JSON.parse(m.data)); } catch (err) { /* ignore a malformed event */ }
      });
    });
    document.documentElement.setAttribute("data-live", "connecting");
    var opened = false;
    es.addEventListener("open", function () {
      document.documentElement.setAttribute("data-live", "open");
      // Back after a break (a dropped connection, a server restart): events
      // may have been missed, so the page reads its state again.
      if (opened) handler({ kind: "reconnected" });
      opened = true;
    });
  }

  // ---- The list -------------------------------------------------------
  function initList(list) {
    var selected = null; // event id of the selected row

    function rows() { return Array.prototype.slice.call(document.querySelectorAll("#rows .row")); }

    function select(i, focus) {
      var all = rows();
      if (all.length === 0) { selected = null; return; }
      i = Math.max(0, Math.min(all.length - 1, i));
      all.forEach(function (r) { r.classList.remove("selected"); });
      all[i].classList.add("selected");
      selected = all[i].getAttribute("data-event-id");
      if (focus) all[i].querySelector("a").focus();
    }

    function index() {
      var all = rows();
      for (var i = 0; i < all.length; i++) {
        if (all[i].getAttribute("data-event-id") === selected) return i;
      }
      return -1;
    }

    document.addEventListener("keydown", function (e) {
      if (typing(e) || e.altKey || e.ctrlKey || e.metaKey) return;
      if (e.key === "j") { select(index() + 1, true); e.preventDefault(); }
      else if (e.key === "k") { select(Math.max(index() - 1, 0), true); e.preventDefault(); }
      else if (e.key === "Enter" && selected && document.activeElement === document.body) {
        window.location.href = "/approvals/" + encodeURIComponent(selected);
      }
    });

    if (list.getAttribute("data-live") !== "on") return;
    var pending = false, again = false;
    function refresh() {
      if (pending) { again = true; return; }
      pending = true;
      var q = new URLSearchParams(window.location.search);
      q.set("fragment", "rows");
      fetchHTML(window.location.pathname + "?" + q.toString()).then(function (html) {
        var fresh = parse(html).getElementById("rows");
        var cur = document.getElementById("rows");
        if (fresh && cur) {
          // Rows the person selected stay selected.
          Array.prototype.forEach.call(cur.querySelectorAll(".pick:checked"), function (c) {
            var same = fresh.querySelector('.pick[value="' + c.value.replace(/["\\]/g, "") + '"]');
            if (same) same.checked = true;
          });
          cur.replaceWith(fresh);
          var i = index();
          if (i >= 0) rows()[i].classList.add("selected");
        }
      }).catch(function () { /* the next event retries */ }).then(function () {
        pending = false;
        if (again) { again = false; refresh(); }
      });
    }
    subscribe(function () { refresh(); });
  }

  // ---- The detail page -------------------------------------------------
  function initDetail(detail) {
    var id = detail.getAttribute("data-event-id");

    document.addEventListener("keydown", function (e) {
      if (typing(e) || e.altKey || e.ctrlKey || e.metaKey) return;
      var el;
      if (e.key === "a") {
        el = document.getElementById("approve-form");
        if (el) { e.preventDefault(); el.requestSubmit ? el.requestSubmit() : el.submit(); }
      } else if (e.key === "r") {
        el = document.getElementById("reject-reason");
        if (el) { e.preventDefault(); el.focus(); }
      } else if (e.key === "e") {
        el = document.getElementById("arguments");
        if (el) { e.preventDefault(); el.focus(); }
      }
    });

    function refresh() {
      fetchHTML("/approvals/" + encodeURIComponent(id) + "?fragment=status").then(function (html) {
        var fresh = parse(html).getElementById("status");
        var cur = document.getElementById("status");
        if (!fresh || !cur) return;
        if (fresh.getAttribute("data-terminal") === "true") {
          // Decided (here or elsewhere): the forms give way to the outcome,
          // and the page's title and heading say how it ended.
          cur.replaceWith(fresh);
          var heading = fresh.getAttribute("data-heading"), h = document.getElementById("heading");
          if (heading) {
            if (h) h.textContent = heading;
            document.title = heading + " · Countersign";
          }
          return;
        }
        // Still pending: progress and timeline change; forms being filled in stay.
        ["state", "timeline"].forEach(function (part) {
          var a = cur.querySelector("#" + part), b = fresh.querySelector("#" + part);
          if (a && b && !a.querySelector("#result, #result-error")) a.replaceWith(b);
          else if (a && b && part === "timeline") a.replaceWith(b);
        });
        if (!fresh.querySelector("#decide") && cur.querySelector("#decide")) {
          var d = cur.querySelector("#decide");
          var ro = fresh.querySelector("#read-only");
          if (ro) d.replaceWith(ro); else d.remove();
        }
      }).catch(function () { /* the next event retries */ });
    }
    subscribe(function (ev) { if (ev.event_id === id || ev.kind === "reconnected") refresh(); });
  }

  function init() {
    var list = document.getElementById("rows");
    if (list) initList(list);
    var detail = document.getElementById("detail");
    if (detail) initDetail(detail);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

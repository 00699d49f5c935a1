// Countersign inbox service worker, served at /sw.js for the whole site.
// It keeps an offline page and the inbox's style, scripts and icons (and
// nothing else: no page, no approval, nothing behind a session), and shows
// the push notifications the server sends, with their one-tap Approve and
// Reject, whose signed token alone casts the vote.
"use strict";

var SHELL_CACHE = "countersign-shell-v1";
var OFFLINE = "/offline";
var SHELL = [OFFLINE, "/assets/inbox.css", "/assets/inbox.js", "/assets/app.js", "/assets/passkeys.js", "/assets/devices.js",
  "/assets/favicon.svg", "/assets/icon-192.png", "/assets/icon-512.png", "/assets/icon-maskable-512.png"];
var ICON = "/assets/icon-192.png";

self.addEventListener("install", function (event) {
  event.waitUntil(caches.open(SHELL_CACHE).then(function (c) { return c.addAll(SHELL); }).then(function () { return self.skipWaiting(); }));
});

self.addEventListener("activate", function (event) {
  event.waitUntil(caches.keys().then(function (names) {
    return Promise.all(names.filter(function (n) { return n !== SHELL_CACHE; }).map(function (n) { return caches.delete(n); }));
  }).then(function () { return self.clients.claim(); }));
});

// Pages come from the network, or the offline page when there is none;
// the shell's files from the network (kept up to date in the cache), or
// the cache when offline. Everything else is the network's alone.
self.addEventListener("fetch", function (event) {
  var req = event.request;
  if (req.method !== "GET") return;
  var url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  if (req.mode === "navigate") {
    event.respondWith(fetch(req).catch(function () { return caches.match(OFFLINE); }));
    return;
  }
  if (SHELL.indexOf(url.pathname) < 0 || url.search !== "") return;
  event.respondWith(fetch(req).then(function (resp) {
    if (resp.ok) {
      var copy = resp.clone();
      caches.open(SHELL_CACHE).then(function (c) { return c.put(url.pathname, copy); });
    }
    return resp;
  }).catch(function () {
    return caches.match(url.pathname).then(function (hit) { return hit || Response.error(); });
  }));
});

// local returns u when it is a URL of this site, else the inbox.
function local(u) {
  try {
    var p = new URL(u, self.location.origin);
    if (p.origin === self.location.origin) return p.href;
  } catch (e) { /* not a URL */ }
  return new URL("/", self.location.origin).href;
}

// sameSite reports whether u is a URL of this site.
function sameSite(u) {
  try { return new URL(u).origin === self.location.origin; } catch (e) { return false; }
}

// shownOptions are the notification options of a push message (v1; see
// notifier/push Message): its body (summary, risk, who asks, deadline),
// and Approve and Reject when it carries their tokens.
function shownOptions(m) {
  var tokens = {}, actions = [];
  (m.actions || []).forEach(function (a) {
    if ((a.action === "approve" || a.action === "reject") && a.token && sameSite(m.action_url || "")) {
      tokens[a.action] = a.token;
      actions.push({ action: a.action, title: a.title || a.action });
    }
  });
  return {
    body: m.body || "", tag: m.tag || "", icon: ICON, badge: ICON, timestamp: Date.now(),
    requireInteraction: actions.length > 0, actions: actions,
    data: { id: m.id || "", event_id: m.event_id || "", kind: m.kind || "", tool: m.tool || "", risk: m.risk || "",
      expires_at: m.expires_at || "", url: local(m.url || "/"), action_url: actions.length ? m.action_url : "", tokens: tokens }
  };
}

self.addEventListener("push", function (event) {
  event.waitUntil(onPush(event));
});

function onPush(event) {
  var m = null;
  try { m = event.data ? event.data.json() : null; } catch (e) { m = null; }
  if (!m || m.v !== 1 || !m.title) {
    return self.registration.showNotification("Countersign", { body: "Something in the inbox needs you.", tag: "cs-unreadable", icon: ICON, data: { url: local("/") } });
  }
  var opts = shownOptions(m);
  // A message delivered again (same id) is shown once.
  return self.registration.getNotifications({ tag: opts.tag }).then(function (shown) {
    if (m.id && shown.some(function (n) { return n.data && n.data.id === m.id; })) return undefined;
    return self.registration.showNotification(m.title, opts);
  });
}

self.addEventListener("notificationclick", function (event) {
  event.waitUntil(onNotificationClick(event));
});

// onNotificationClick votes for an Approve or Reject action, else opens
// the approval's page.
function onNotificationClick(event) {
  var n = event.notification, d = n.data || {};
  n.close();
  var token = d.tokens && d.tokens[event.action];
  if (token && d.action_url) return vote(n, d, event.action, token);
  return openPage(d.url || local("/"));
}

// vote posts the action's token (it names the person, the request, the
// decision and the arguments shown; no session is needed or sent), then
// says in a notification what became of it.
function vote(n, d, decision, token) {
  var tool = d.tool || "the request";
  return fetch(d.action_url, {
    method: "POST", credentials: "omit", cache: "no-store",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: token })
  }).then(function (r) {
    return r.json().catch(function () { return {}; }).then(function (ans) {
      if (r.ok) return counted(decision, tool, ans);
      var e = ans.error || {};
      return { result: e.code || "http_" + r.status, title: "Not counted: " + tool, body: (e.message || "The inbox answered " + r.status + ".") + " Tap to open the request." };
    });
  }, function () {
    return { result: "unreachable", title: "Not sent: " + tool, body: "The inbox could not be reached. Tap to open the request and decide there." };
  }).then(function (res) {
    return self.registration.showNotification(res.title, { body: res.body, tag: n.tag, icon: ICON, badge: ICON,
      data: { id: (d.id || "") + ":" + decision, event_id: d.event_id, url: d.url, result: res.result, status: res.status || "" } });
  });
}

// counted words the answer of a vote that counted (or is being counted).
function counted(decision, tool, ans) {
  var verb = decision === "approve" ? "approval" : "rejection";
  if (ans.result === "in_flight") return { result: "in_flight", title: "Sent: your " + verb + " of " + tool, body: "It is being counted." };
  var st = ans.status || "";
  if (st === "approved") return { result: "counted", status: st, title: "Approved: " + tool, body: "Your " + verb + " counted: " + tool + " is approved." };
  if (st === "rejected") return { result: "counted", status: st, title: "Rejected: " + tool, body: "Your " + verb + " counted: " + tool + " is rejected." };
  return { result: "counted", status: st, title: "Your " + verb + " counted: " + tool, body: "The request waits for other approvers." };
}

// openPage focuses a window showing url, or opens one.
function openPage(url) {
  return self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(function (list) {
    for (var i = 0; i < list.length; i++) {
      if (list[i].url === url && "focus" in list[i]) return list[i].focus();
    }
    return self.clients.openWindow ? self.clients.openWindow(url) : undefined;
  });
}

// Countersign inbox, the devices page: subscribes this browser to push
// notifications (permission, then PushManager.subscribe with the server's
// VAPID key) and posts the subscription to the inbox with the page's CSRF
// token.
"use strict";
(function () {
  var form = document.getElementById("subscribe-form");
  if (!form) return;
  var button = document.getElementById("subscribe"), err = document.getElementById("subscribe-error");

  function fail(msg) { err.textContent = msg; button.disabled = false; }

  // key decodes the base64url VAPID key for applicationServerKey.
  function key(b64) {
    var s = b64.replace(/-/g, "+").replace(/_/g, "/");
    s += "===".slice((s.length + 3) % 4);
    var raw = atob(s), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  // within settles as p does, or fails after ms (a browser whose push
  // service cannot be reached never settles).
  function within(ms, p, what) {
    return new Promise(function (resolve, reject) {
      var timer = setTimeout(function () { reject(new Error(what)); }, ms);
      p.then(function (v) { clearTimeout(timer); resolve(v); }, function (e) { clearTimeout(timer); reject(e); });
    });
  }

  function post(sub) {
    var body = new URLSearchParams();
    body.set("csrf", form.querySelector("input[name=csrf]").value);
    body.set("name", document.getElementById("device-name").value.trim());
    body.set("subscription", JSON.stringify(sub.toJSON()));
    return fetch("/devices", { method: "POST", body: body, credentials: "same-origin" }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (ans) {
        if (!r.ok) throw new Error((ans.error && ans.error.message) || "The inbox answered " + r.status + ".");
        location.assign("/devices?added=" + encodeURIComponent(ans.device.id));
      });
    });
  }

  function subscribe() {
    if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
      return Promise.reject(new Error("This browser cannot receive push notifications. On an iPhone or iPad, add the inbox to the Home Screen first (Share, then Add to Home Screen) and open it from there."));
    }
    return Notification.requestPermission().then(function (p) {
      if (p !== "granted") throw new Error("Notifications are blocked for this site. Allow them in the browser's site settings, then try again.");
      return navigator.serviceWorker.register("/sw.js", { scope: "/" }).then(function () { return navigator.serviceWorker.ready; });
    }).then(function (reg) {
      return reg.pushManager.getSubscription().then(function (old) {
        return old || within(30000, reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key(form.getAttribute("data-key")) }),
          "the browser's push service did not answer");
      }).catch(function (e) {
        throw new Error("This browser could not subscribe to push notifications (" + (e && e.message || e) + ").");
      });
    });
  }

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    err.textContent = "";
    button.disabled = true;
    subscribe().then(post).catch(function (e2) { fail(e2.message || String(e2)); });
  });
  button.disabled = false;
})();

// Countersign inbox: installs the service worker (/sw.js, for the whole
// site) that makes the inbox an installable app and shows its push
// notifications.
"use strict";
if ("serviceWorker" in navigator) {
  window.addEventListener("load", function () {
    navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(function () { /* the inbox works without it */ });
  });
}

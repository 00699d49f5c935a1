package inbox

import (
	"net/http"
)

// The inbox installs as a web app: its manifest, the service worker at the
// root scope (which keeps an offline page and the inbox's style, script and
// icons, and shows push notifications with their one-tap actions), and the
// offline page itself. None of them needs a session or holds approval data.

const (
	// manifestPath and workerPath are served at the root: the service
	// worker's scope is its own directory, and it must control every page.
	manifestPath = "/manifest.webmanifest"
	workerPath   = "/sw.js"
	offlinePath  = "/offline"
)

// registerApp serves the manifest, the service worker and the offline page.
func (in *Inbox) registerApp(mux Backend) {
	mux.Handle("GET "+manifestPath, in.secure(serveFile("web/manifest.webmanifest", "application/manifest+json")))
	mux.Handle("GET "+workerPath, in.secure(serveFile("web/sw.js", "text/javascript; charset=utf-8")))
	mux.Handle("GET "+offlinePath, in.secure(func(w http.ResponseWriter, r *http.Request) {
		in.render(w, http.StatusOK, "offline", in.pageFor(nil, "Offline", ""))
	}))
}

// serveFile answers an embedded file with its type; browsers check it
// again on every visit (no-cache), so that a new service worker or
// manifest reaches them with the next release.
func serveFile(name, contentType string) http.HandlerFunc {
	data, err := webFS.ReadFile(name)
	if err != nil {
		panic("inbox: " + name + " is not embedded: " + err.Error())
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(data)
	}
}

package api

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The web inbox: people sign in with their API token, which is exchanged
// for a session kept in this process's memory. Replicas behind a load
// balancer therefore need sticky sessions (or people sign in again when
// they land on another replica).

const (
	// sessionCookie names the inbox's session cookie.
	sessionCookie = "countersign_session"
	// sessionTTL is how long a session lasts after sign-in.
	sessionTTL = 12 * time.Hour
	// csrfField is the form field (and csrfHeader the header) that carries
	// a session's CSRF token on every POST.
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
	// maxFormBytes bounds a form post.
	maxFormBytes = 1 << 20
)

// contentSecurityPolicy allows the inbox's own scripts, styles and images
// only: no inline code, no framing, forms only to this origin.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

// session is one signed-in person.
type session struct {
	id      string
	p       principal
	csrf    string
	expires time.Time
}

// sessionStore keeps sessions in memory, by id.
type sessionStore struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*session
}

func randomID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// create starts a session for p and drops the expired ones.
func (st *sessionStore) create(p principal) (*session, error) {
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	csrf, err := randomID()
	if err != nil {
		return nil, err
	}
	now := st.now()
	sess := &session{id: id, p: p, csrf: csrf, expires: now.Add(sessionTTL)}
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, old := range st.m {
		if !now.Before(old.expires) {
			delete(st.m, k)
		}
	}
	st.m[id] = sess
	return sess, nil
}

// get returns the live session with id, or nil.
func (st *sessionStore) get(id string) *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	sess, ok := st.m[id]
	if !ok {
		return nil
	}
	if !st.now().Before(sess.expires) {
		delete(st.m, id)
		return nil
	}
	return sess
}

func (st *sessionStore) delete(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.m, id)
}

// inbox serves the web inbox on the API's server.
type inbox struct {
	s        *Server
	sessions *sessionStore
	logins   *prometheus.CounterVec
	assets   http.Handler
}

func newInbox(s *Server) *inbox {
	in := &inbox{s: s, sessions: &sessionStore{now: s.cfg.Now, m: map[string]*session{}}}
	in.logins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_inbox_logins_total",
		Help: "Sign-ins to the web inbox by result (ok, invalid_token).",
	}, []string{"result"})
	if err := s.cfg.Registerer.Register(in.logins); err != nil {
		s.log.Warn("inbox login metric not registered", "err", err)
	}
	sub, err := fs.Sub(webFS, "web/assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	in.assets = http.StripPrefix("/assets/", http.FileServerFS(sub))
	return in
}

// register adds the inbox's routes to mux.
func (in *inbox) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", in.page(in.getList))
	mux.HandleFunc("GET /history", in.page(in.getHistory))
	mux.HandleFunc("GET /approvals/{event_id}", in.page(in.getDetail))
	mux.HandleFunc("POST /approvals/{event_id}/decide", in.page(in.postDecide))
	mux.HandleFunc("GET /inbox/events", in.secure(in.getEvents))
	mux.HandleFunc("GET /login", in.secure(in.getLogin))
	mux.HandleFunc("POST /login", in.secure(in.postLogin))
	mux.HandleFunc("POST /logout", in.page(in.postLogout))
	mux.Handle("GET /assets/", in.secure(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		in.assets.ServeHTTP(w, r)
	}))
}

// secure sets the inbox's security headers on every answer.
func (in *inbox) secure(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		h(w, r)
	}
}

// sessionOf returns the request's live session, or nil.
func (in *inbox) sessionOf(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	return in.sessions.get(c.Value)
}

// pageHandler serves a page for a signed-in person.
type pageHandler func(w http.ResponseWriter, r *http.Request, sess *session)

// page wraps h with the security headers and the session check: a page
// request without a session goes to the sign-in form; a POST must carry
// the session's CSRF token.
func (in *inbox) page(h pageHandler) http.HandlerFunc {
	return in.secure(func(w http.ResponseWriter, r *http.Request) {
		sess := in.sessionOf(r)
		if sess == nil {
			if r.Method != http.MethodGet {
				http.Error(w, "sign in first", http.StatusForbidden)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "the form could not be read", http.StatusBadRequest)
				return
			}
			if !validCSRF(sess, r) {
				in.s.log.Warn("inbox post without a valid CSRF token", "path", r.URL.Path, "subject", sess.p.subject)
				http.Error(w, "the form is out of date or was not sent by the inbox; reload the page and try again", http.StatusForbidden)
				return
			}
		}
		if lw, ok := w.(*loggingWriter); ok {
			lw.token = sess.p.name
		}
		h(w, r, sess)
	})
}

// validCSRF compares the posted CSRF token with the session's in constant time.
func validCSRF(sess *session, r *http.Request) bool {
	got := r.PostForm.Get(csrfField)
	if got == "" {
		got = r.Header.Get(csrfHeader)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// overTLS reports whether the request reached us, or the proxy in front, over TLS.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// localPath returns next when it is a path on this server, else "/".
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

func (in *inbox) getLogin(w http.ResponseWriter, r *http.Request) {
	if in.sessionOf(r) != nil {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	in.render(w, http.StatusOK, "login", loginPage{Page: Page{Title: "Sign in"}, Next: localPath(r.URL.Query().Get("next"))})
}

// postLogin exchanges a bearer token for a session. The token is checked
// exactly as the API checks it; it is neither stored nor logged.
func (in *inbox) postLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	next := localPath(r.PostForm.Get("next"))
	var p *principal
	if token != "" {
		p = in.s.authenticate(&http.Request{Header: http.Header{"Authorization": {"Bearer " + token}}})
	}
	if p == nil {
		in.logins.WithLabelValues("invalid_token").Inc()
		in.s.log.Warn("inbox sign-in refused: the token is not valid", "remote", r.RemoteAddr)
		in.render(w, http.StatusUnauthorized, "login", loginPage{Page: Page{Title: "Sign in"}, Next: next, Error: "That token is not valid."})
		return
	}
	sess, err := in.sessions.create(*p)
	if err != nil {
		http.Error(w, "could not start a session", http.StatusInternalServerError)
		return
	}
	in.logins.WithLabelValues("ok").Inc()
	in.s.log.Info("inbox sign-in", "subject", p.subject, "token_name", p.name)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: sess.id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), Expires: sess.expires, MaxAge: int(sessionTTL / time.Second),
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (in *inbox) postLogout(w http.ResponseWriter, r *http.Request, sess *session) {
	in.sessions.delete(sess.id)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: -1,
	})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

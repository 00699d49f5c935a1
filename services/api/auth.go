package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
)

// principal is the authenticated caller.
type principal struct {
	name    string
	subject string
	roles   []string
}

func (p *principal) has(roles ...string) bool {
	if slices.Contains(p.roles, RoleAdmin) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(p.roles, r) {
			return true
		}
	}
	return false
}

type tokenEntry struct {
	hash []byte
	p    principal
}

func newTokenEntries(tokens []Token) []tokenEntry {
	out := make([]tokenEntry, 0, len(tokens))
	for _, t := range tokens {
		h, _ := hex.DecodeString(t.SHA256) // validated by Config.validate
		out = append(out, tokenEntry{hash: h, p: principal{name: t.Name, subject: t.Subject, roles: slices.Clone(t.Roles)}})
	}
	return out
}

type principalKey struct{}

func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// authenticate finds the token presented in the Authorization header. Every
// configured hash, and every hash of the directory, is compared in constant
// time, whatever matches first. A directory token's principal is its user:
// the subject is the user's id.
func (s *Server) authenticate(r *http.Request) *principal {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil
	}
	return s.authenticateSum(sha256.Sum256([]byte(token)))
}

// authenticateSum finds the principal of a token known by its SHA-256, with
// the same constant-time search as authenticate.
func (s *Server) authenticateSum(sum [sha256.Size]byte) *principal {
	var found *principal
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].hash) == 1 && found == nil {
			found = &s.tokens[i].p
		}
	}
	if s.cfg.Directory == nil {
		return found
	}
	// Searched even when a configured token matched, so that the time taken
	// does not tell which kind of token was presented.
	u, tok, ok := s.cfg.Directory.Current().AuthenticateSum(sum)
	if ok && found == nil {
		found = &principal{name: tok.Name, subject: u.ID, roles: tok.Roles}
	}
	return found
}

// authed wraps h with bearer authentication and, when roles are given, a
// role check (an admin passes every check).
func (s *Server) authed(h http.HandlerFunc, roles ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="countersign"`)
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthenticated, "a bearer token is required"))
			return
		}
		p := s.authenticate(r)
		if p == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="countersign", error="invalid_token"`)
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthenticated, "the bearer token is not valid"))
			return
		}
		if len(roles) > 0 && !p.has(roles...) {
			writeError(w, errorf(http.StatusForbidden, CodeForbidden, "this token lacks the role for this request (one of: %s)", strings.Join(roles, ", ")))
			return
		}
		if lw, ok := w.(*loggingWriter); ok {
			lw.token = p.name
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// Principal is an authenticated caller: the identity a bearer token (or an
// inbox session signed in with one) stands for.
type Principal struct {
	// Name is the token's name, for logs; the token itself is never kept.
	Name string
	// Subject is the caller's id: the approver id votes are cast under, or
	// the agent id.
	Subject string
	// Roles are the token's roles (agent, approver, admin, viewer, auditor).
	Roles []string
	// Tenants limits what the caller reads, decides and submits to these
	// tenants; empty means no limit.
	Tenants []string
	// Agents limits a viewer or auditor to agents matching these patterns,
	// and an agent to submitting as them; empty means every agent.
	Agents []string
	// Expires, when set, is when the credential stops being valid (an
	// identity provider's token): a stream opened with it ends then.
	Expires time.Time
}

// Reader is what p may read, for the rules of contracts/approval.
func (p *Principal) Reader() approval.Reader {
	return approval.Reader{
		ID: p.Subject, Admin: slices.Contains(p.Roles, RoleAdmin), Approver: slices.Contains(p.Roles, RoleApprover),
		Agent:   slices.Contains(p.Roles, RoleAgent),
		Auditor: slices.Contains(p.Roles, RoleViewer) || slices.Contains(p.Roles, RoleAuditor),
		Tenants: p.Tenants, Agents: p.Agents,
	}
}

// CanRead reports whether p may read rec; a record p may not read is
// answered as if it did not exist.
func (p *Principal) CanRead(rec *contracts.Record) bool { return approval.CanRead(rec, p.Reader()) }

// Has reports whether p holds one of roles; an admin holds every role.
func (p *Principal) Has(roles ...string) bool {
	if slices.Contains(p.Roles, RoleAdmin) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(p.Roles, r) {
			return true
		}
	}
	return false
}

type tokenEntry struct {
	hash []byte
	p    Principal
}

func newTokenEntries(tokens []Token) []tokenEntry {
	out := make([]tokenEntry, 0, len(tokens))
	for _, t := range tokens {
		h, _ := hex.DecodeString(t.SHA256) // validated by Config.validate
		out = append(out, tokenEntry{hash: h, p: Principal{Name: t.Name, Subject: t.Subject, Roles: slices.Clone(t.Roles), Tenants: slices.Clone(t.Tenants), Agents: slices.Clone(t.Agents)}})
	}
	return out
}

type principalKey struct{}

func principalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// authenticate finds the principal of the bearer token presented in the
// Authorization header: nil and an *Error when there is none. Every
// configured hash, and every hash of the directory, is compared in constant
// time, whatever matches first; a directory token's principal is its user
// (the subject is the user's id). A token none of them matches that is a
// signed JWT goes to the identity provider's verifier, when one is set
// (SetBearerVerifier).
func (s *Server) authenticate(r *http.Request) (*Principal, *Error) {
	invalid := errorf(http.StatusUnauthorized, CodeUnauthenticated, "the bearer token is not valid")
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, invalid
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, invalid
	}
	if p := s.authenticateSum(sha256.Sum256([]byte(token))); p != nil {
		return p, nil
	}
	v := s.bearer.Load()
	if v == nil || !looksLikeJWT(token) {
		return nil, invalid
	}
	p, err := (*v).Verify(r.Context(), token)
	if err != nil {
		var aerr *Error
		if errors.As(err, &aerr) {
			return nil, aerr
		}
		return nil, invalid
	}
	return &p, nil
}

// BearerVerifier verifies bearer tokens that are not Countersign tokens:
// an identity provider's signed JWTs. Verify answers the principal the
// token stands for, or an *Error saying why it is refused.
type BearerVerifier interface {
	Verify(ctx context.Context, token string) (Principal, error)
}

// SetBearerVerifier makes v judge the bearer tokens that are signed JWTs
// and match no Countersign token (the inbox sets its OIDC provider's).
func (s *Server) SetBearerVerifier(v BearerVerifier) { s.bearer.Store(&v) }

// looksLikeJWT reports whether token has a JWS compact form's shape: three
// base64url parts.
func looksLikeJWT(token string) bool {
	if strings.Count(token, ".") != 2 || len(token) > maxJWT {
		return false
	}
	for _, c := range token {
		if c != '.' && c != '-' && c != '_' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// maxJWT bounds the size of a JWT bearer token read.
const maxJWT = 16 << 10

// authenticateSum finds the principal of a token known by its SHA-256, with
// the same constant-time search as authenticate.
func (s *Server) authenticateSum(sum [sha256.Size]byte) *Principal {
	var found *Principal
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
		found = &Principal{Name: tok.Name, Subject: u.ID, Roles: tok.Roles, Tenants: tok.Tenants, Agents: tok.Agents}
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
		p, aerr := s.authenticate(r)
		if aerr != nil {
			if aerr.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="countersign", error="invalid_token"`)
			}
			writeError(w, aerr)
			return
		}
		if len(roles) > 0 && !p.Has(roles...) {
			writeError(w, errorf(http.StatusForbidden, CodeForbidden, "this token lacks the role for this request (one of: %s)", strings.Join(roles, ", ")))
			return
		}
		if lw, ok := w.(*loggingWriter); ok {
			lw.token = p.Name
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

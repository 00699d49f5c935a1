package receipt

import (
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
)

// ApproversType is the typ header of the approvers document: the approvers'
// passkey public keys, signed with a receipt key. A verifier refuses it as
// a receipt, and a receipt as it.
const ApproversType = "countersign-approvers+jwt"

// ApproversTTL is how long a signed approvers document is valid: a
// verifier that caches one learns of a revocation within its own TTL, and
// never trusts a copy older than this.
const ApproversTTL = time.Hour

// Approvers is the approvers document: every enrolled passkey, revoked ones
// included (with their revocation time), and the relying party they are
// bound to.
type Approvers struct {
	Issuer    string        `json:"iss"`
	IssuedAt  int64         `json:"iat"`
	ExpiresAt int64         `json:"exp"`
	RPID      string        `json:"rp_id"`
	Origins   []string      `json:"origins"`
	Keys      []ApproverKey `json:"approvers"`
}

// ApproverKey is one person's passkey.
type ApproverKey struct {
	Person       string        `json:"person"`
	CredentialID string        `json:"credential_id"`
	PublicKey    contracts.JWK `json:"public_key"`
	CreatedAt    time.Time     `json:"created_at"`
	RevokedAt    *time.Time    `json:"revoked_at,omitempty"`
}

// Party is the relying party of the document.
func (d *Approvers) Party() contracts.PasskeyParty {
	return contracts.PasskeyParty{RPID: d.RPID, Origins: d.Origins}
}

// Key finds the passkey with credential id.
func (d *Approvers) Key(id string) (ApproverKey, bool) {
	for _, k := range d.Keys {
		if subtle.ConstantTimeCompare([]byte(k.CredentialID), []byte(id)) == 1 {
			return k, true
		}
	}
	return ApproverKey{}, false
}

// Approvers implements ApproverSource: a document that was read once (a
// pinned copy) is its own source.
func (d *Approvers) Approvers(context.Context) (*Approvers, error) { return d, nil }

// ApproverSource gives the approvers document a verifier checks signatures
// against: a pinned *Approvers, or an ApproversFetcher.
type ApproverSource interface {
	Approvers(ctx context.Context) (*Approvers, error)
}

// SignApprovers signs d (iss, iat and exp are filled in) as a compact JWS
// of type ApproversType.
func (s *Signer) SignApprovers(d Approvers) (string, error) {
	now := s.cfg.Now()
	d.Issuer, d.IssuedAt, d.ExpiresAt = s.cfg.Issuer, now.Unix(), now.Add(ApproversTTL).Unix()
	if d.Keys == nil {
		d.Keys = []ApproverKey{}
	}
	h, err := json.Marshal(header{Alg: Algorithm, Typ: ApproversType, Kid: s.cfg.Key.ID})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(payload)
	return input + "." + b64.EncodeToString(ed25519.Sign(s.cfg.Key.Key, []byte(input))), nil
}

// ParseApprovers checks an approvers document's signature with keys (the
// receipt keys), its issuer (default DefaultIssuer) and that it is current
// at now, and returns it.
func ParseApprovers(ctx context.Context, token string, keys KeySource, issuer string, now time.Time) (*Approvers, error) {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return nil, malformedf("approvers document: not a compact JWS")
	}
	var h header
	if err := decodePart(parts[0], "approvers header", &h); err != nil {
		return nil, err
	}
	if h.Alg != Algorithm || h.Typ != ApproversType || h.Kid == "" || len(h.Crit) > 0 {
		return nil, malformedf("approvers document: header alg %q typ %q, want %s %s with a kid", h.Alg, h.Typ, Algorithm, ApproversType)
	}
	pub, err := keys.Key(ctx, h.Kid)
	if err != nil {
		return nil, err
	}
	sig, err := b64.Strict().DecodeString(parts[2])
	if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return nil, wrap(ErrBadSignature, "the approvers document's signature does not verify with key %q", h.Kid)
	}
	var d Approvers
	if err := decodePart(parts[1], "approvers payload", &d); err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(d.Issuer), []byte(issuer)) != 1 {
		return nil, wrap(ErrWrongIssuer, "approvers document of issuer %q, want %q", d.Issuer, issuer)
	}
	if !now.Before(time.Unix(d.ExpiresAt, 0)) {
		return nil, wrap(ErrExpired, "the approvers document expired at %s", time.Unix(d.ExpiresAt, 0).UTC().Format(time.RFC3339))
	}
	if d.RPID == "" || len(d.Origins) == 0 {
		return nil, malformedf("approvers document: rp_id and origins are required")
	}
	return &d, nil
}

// ApproversFetcherConfig configures an ApproversFetcher.
type ApproversFetcherConfig struct {
	// URL of the document, e.g.
	// https://countersign.example.com/.well-known/countersign-approvers.
	URL string
	// Keys verify the document: the receipt keys (a KeySet or Fetcher).
	Keys KeySource
	// Issuer is the iss the document must carry (default DefaultIssuer).
	Issuer string
	// Client makes the requests (default: one with a 10 s timeout).
	Client *http.Client
	// TTL is how long a fetched document is used (default 1 minute): a
	// revoked passkey stops passing at most TTL after its revocation.
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ApproversFetcher is an ApproverSource that fetches the document over
// HTTP and caches it for TTL. It fails closed: a document that cannot be
// fetched, or does not verify, is an error.
type ApproversFetcher struct {
	cfg       ApproversFetcherConfig
	mu        sync.Mutex
	doc       *Approvers
	fetchedAt time.Time
}

// NewApproversFetcher returns an ApproversFetcher; it fetches on first use.
func NewApproversFetcher(cfg ApproversFetcherConfig) (*ApproversFetcher, error) {
	if cfg.URL == "" || cfg.Keys == nil {
		return nil, errors.New("receipt: ApproversFetcherConfig.URL and Keys are required")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &ApproversFetcher{cfg: cfg}, nil
}

// Approvers implements ApproverSource.
func (f *ApproversFetcher) Approvers(ctx context.Context) (*Approvers, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	if f.doc != nil && now.Sub(f.fetchedAt) < f.cfg.TTL && now.Before(time.Unix(f.doc.ExpiresAt, 0)) {
		return f.doc, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("receipt: approvers request: %w", err)
	}
	req.Header.Set("Accept", "application/jwt")
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("receipt: fetch approvers: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("receipt: fetch approvers %s: HTTP %d", f.cfg.URL, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("receipt: fetch approvers: %w", err)
	}
	doc, err := ParseApprovers(ctx, string(data), f.cfg.Keys, f.cfg.Issuer, now)
	if err != nil {
		return nil, err
	}
	f.doc, f.fetchedAt = doc, now
	return doc, nil
}

// Humans makes Verify require the approvers' own signatures: at least Min
// distinct people (and at least the quorum the receipt says the rule
// required) each signed, with a passkey listed and not revoked in
// Approvers, the approval statement of exactly this call: this event and
// tool, the arguments about to run, the decision approve or edit. A
// receipt without them — a policy or grant receipt, or one the server's
// key signed alone — is refused (ErrSignaturesMissing), and so is one with
// any signature that does not hold (ErrSignatureInvalid).
type Humans struct {
	// Min is how many distinct people must have signed (at least 1).
	Min int
	// Approvers are the published passkeys: an ApproversFetcher, or a
	// pinned *Approvers (against a compromised server, which could publish
	// a key of its own: see docs/security.md).
	Approvers ApproverSource
	// People, when set, are the only person ids whose signatures count.
	People []string
	// MaxAge bounds how long before the receipt was issued a statement may
	// have been signed (default 24 hours; a quorum can take a while).
	MaxAge time.Duration
}

// checkHumans applies h to a receipt's claims.
func checkHumans(ctx context.Context, c *Claims, h *Humans, leeway time.Duration) error {
	if h.Approvers == nil {
		return errors.New("receipt: Humans.Approvers is required")
	}
	need := max(1, h.Min)
	if c.Quorum != nil {
		need = max(need, c.Quorum.Required)
	}
	if c.Basis != BasisApproval || c.StepUp != contracts.StepUpPasskey || len(c.Signatures) == 0 {
		return wrap(ErrSignaturesMissing, "the tool requires %d approver signature(s) and the receipt (basis %s) carries none", need, c.Basis)
	}
	doc, err := h.Approvers.Approvers(ctx)
	if err != nil {
		return err
	}
	maxAge := h.MaxAge
	if maxAge == 0 {
		maxAge = 24 * time.Hour
	}
	var people []string
	for i, a := range c.Signatures {
		person, err := checkSignature(a, c, doc, h, maxAge, leeway)
		if err != nil {
			return wrap(ErrSignatureInvalid, "signature %d: %v", i, err)
		}
		if !slices.Contains(people, person) {
			people = append(people, person)
		}
	}
	if len(people) < need {
		return wrap(ErrSignaturesMissing, "%d distinct approver(s) signed (%s); the tool requires %d", len(people), strings.Join(people, ", "), need)
	}
	return nil
}

// checkSignature checks one assertion of c against doc and returns whose
// it is.
func checkSignature(a contracts.PasskeyAssertion, c *Claims, doc *Approvers, h *Humans, maxAge, leeway time.Duration) (string, error) {
	k, ok := doc.Key(a.CredentialID)
	if !ok {
		return "", errors.New("by a passkey the approvers document does not list")
	}
	if k.RevokedAt != nil {
		return "", fmt.Errorf("by %s's passkey revoked at %s", k.Person, k.RevokedAt.UTC().Format(time.RFC3339))
	}
	if len(h.People) > 0 && !slices.Contains(h.People, k.Person) {
		return "", fmt.Errorf("by %s, whom this tool does not accept", k.Person)
	}
	st, err := passkey.Verify(a, k.PublicKey, doc.Party())
	if err != nil {
		return "", err
	}
	switch {
	case st.Approver != k.Person:
		return "", fmt.Errorf("the statement names %s, the passkey is %s's", st.Approver, k.Person)
	case st.EventID != c.EventID || st.Tool != c.Tool:
		return "", fmt.Errorf("the statement is for %s on %s, the receipt for %s on %s", st.Tool, st.EventID, c.Tool, c.EventID)
	case st.Decision != contracts.DecisionApprove && st.Decision != contracts.DecisionEdit:
		return "", fmt.Errorf("the statement's decision is %s", st.Decision)
	case st.Effective() != c.ArgsSHA256:
		return "", fmt.Errorf("the statement approves arguments %s, the receipt allows %s", st.Effective(), c.ArgsSHA256)
	}
	t, _ := st.Time() // ParseStatement checked it
	issued := time.Unix(c.IssuedAt, 0)
	if t.After(issued.Add(passkey.ClockSkew + leeway)) {
		return "", fmt.Errorf("the statement (%s) is dated after the receipt was issued", st.At)
	}
	if issued.Sub(t) > maxAge+leeway {
		return "", fmt.Errorf("the statement (%s) is more than %s older than the receipt", st.At, maxAge)
	}
	return k.Person, nil
}

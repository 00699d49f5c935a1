package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/directory"
)

// Roles a token can hold, the same in the config and in the directory. An
// admin may do everything.
const (
	RoleAgent    = directory.RoleAgent
	RoleApprover = directory.RoleApprover
	RoleAdmin    = directory.RoleAdmin
	RoleViewer   = directory.RoleViewer
	RoleAuditor  = directory.RoleAuditor
)

// Token is one accepted bearer token. Only the hash of the token is kept.
type Token struct {
	// Name identifies the token in logs (the token itself is never logged).
	Name string `json:"name" yaml:"name"`
	// Subject is the caller's identity: the approver id of an approver, the
	// agent id of an agent. Votes are cast in this name.
	Subject string `json:"subject" yaml:"subject"`
	// SHA256 is the lowercase hex SHA-256 of the bearer token (HashToken).
	SHA256 string `json:"sha256" yaml:"sha256"`
	// Roles held by the token: agent, approver, admin, viewer, auditor.
	Roles []string `json:"roles" yaml:"roles"`
	// Tenants limits the token to requests of these tenants: it reads,
	// decides and submits for no other (empty: no limit).
	Tenants []string `json:"tenants,omitempty" yaml:"tenants"`
	// Agents limits a viewer or auditor token to requests of agents
	// matching these patterns ("billing-*"), and an agent token to
	// submitting as them (empty: every agent).
	Agents []string `json:"agents,omitempty" yaml:"agents"`
	// Development marks the token serve generates when none are
	// configured: one person playing agent, approver and admin on one
	// machine, who may approve what they submitted. Never read from a
	// configuration file.
	Development bool `json:"-" yaml:"-"`
}

// Config wires a Server.
type Config struct {
	// JS is the JetStream context; the streams and bucket must exist.
	JS jetstream.JetStream
	// Gate reviews the tool calls of POST /v1/reviews.
	Gate *orchestrator.Gate
	// Waiter is the process's record waiter (optional), the one the Gate
	// uses. The API's listing index watches the whole bucket and hands it
	// every change, so a waiter made with orchestrator.NewFedWaiter needs no
	// watch of its own and the process watches the bucket once. (A waiter
	// with its own watch is told the changes as well, harmlessly.)
	Waiter *orchestrator.Waiter
	// IndexRecent is how many decided records the records index keeps in
	// memory beside every pending one (DefaultIndexRecent when 0); older
	// history is listed from the bucket's stream.
	IndexRecent int
	// IndexSnapshot is a file where the records index notes where it stands
	// when it stops and every 5 minutes (revisions only; no record
	// content), so that a start on a long history reads the pending
	// records and the newest decided ones from there instead of the
	// headers of every record message. Empty: no note, every start reads
	// the headers. serve keeps it in its data directory.
	IndexSnapshot string
	// HistoryPageBudget is about how long one page of older history looks
	// through the bucket (25 ms when 0; it always reads the headers of at
	// least 2,048 records); the page then answers with what it found and a
	// cursor.
	HistoryPageBudget time.Duration
	// Policies is the live policy store; GET and POST /v1/policy use it.
	// Without it the API shows the gate's policy and cannot apply one.
	Policies *orchestrator.PolicyStore
	// Tokens accepted on /v1, besides the Directory's. With neither, every
	// /v1 request is refused.
	Tokens []Token
	// Directory (optional) holds approvers and their tokens; it may change
	// at any time (a directory.Watcher). A directory token authenticates its
	// user: votes are cast under the user's id. A token hash found both here
	// and in Tokens authenticates as the Tokens entry.
	Directory directory.Source
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer receives the API's metrics and Gatherer is served on
	// /metrics. With neither, a private registry is used for both; a
	// Registerer that is also a Gatherer (a *prometheus.Registry) serves both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Metrics says who may read GET /metrics: MetricsToken (the default:
	// an admin's token or one of MetricsTokens), MetricsOpen or MetricsOff.
	Metrics string
	// MetricsTokens are the SHA-256 hashes (lowercase hex) of scrape
	// tokens: they read /metrics and nothing else.
	MetricsTokens []string
	// Ready is checked by /readyz besides the NATS connection (optional).
	Ready func(ctx context.Context) error
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ReceiptKeys are the public keys served at /.well-known/jwks.json,
	// which verify the receipts the arbiter signs (see contracts/receipt).
	ReceiptKeys *receipt.KeySet
	// Budgets bound what one principal may take of the API: its request
	// rates, live event streams and pending approvals (zero fields take
	// the defaults; see Budgets).
	Budgets Budgets
	// BudgetRefusals counts what is refused over a budget (optional: the
	// API registers its own with Registerer when nil). A process that also
	// limits connections shares one (NewBudgetRefusals) and registers it.
	BudgetRefusals *prometheus.CounterVec
	// Receipts signs the receipts of calls a review allows without an
	// approval: under a standing grant, or by a policy rule with receipt:
	// true. Its public key is served with ReceiptKeys. Without it those
	// calls get no receipt, and a tool that requires receipts refuses them.
	Receipts *receipt.Signer
	// Passkeys binds passkeys to the inbox (the WebAuthn relying party);
	// zero: passkeys are off.
	Passkeys PasskeyConfig
	// Push turns on Web Push subscriptions and one-tap actions; zero: off.
	Push PushConfig
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil && c.Gatherer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = reg, reg
	}
	if c.Gatherer == nil {
		if g, ok := c.Registerer.(prometheus.Gatherer); ok {
			c.Gatherer = g
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Budgets.setDefaults()
	if c.Metrics == "" {
		c.Metrics = MetricsToken
	}
	if c.Receipts != nil {
		// What the API signs verifies with the keys it publishes.
		c.ReceiptKeys = c.ReceiptKeys.Merge(c.Receipts.Keys())
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("api: Config.JS is required"))
	}
	if c.IndexRecent < 0 || c.HistoryPageBudget < 0 {
		errs = append(errs, errors.New("api: Config.IndexRecent and Config.HistoryPageBudget must not be negative"))
	}
	if c.Gate == nil {
		errs = append(errs, errors.New("api: Config.Gate is required"))
	}
	if err := c.Passkeys.validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Metrics {
	case MetricsToken, MetricsOpen, MetricsOff:
	default:
		errs = append(errs, fmt.Errorf("api: Config.Metrics must be %s, %s or %s, got %q", MetricsToken, MetricsOpen, MetricsOff, c.Metrics))
	}
	for i, h := range c.MetricsTokens {
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("api: Config.MetricsTokens[%d] must be 64 hex characters (the SHA-256 of the token)", i))
		}
	}
	if err := c.Budgets.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("api: Config.Budgets: %w", err))
	}
	if c.Registerer == nil {
		errs = append(errs, errors.New("api: Config.Registerer is required when Config.Gatherer is set"))
	}
	if c.Gatherer == nil {
		errs = append(errs, errors.New("api: Config.Gatherer is required when Config.Registerer is not a prometheus.Gatherer"))
	}
	seen := map[string]int{}
	for i, t := range c.Tokens {
		where := fmt.Sprintf("api: Config.Tokens[%d]", i)
		if t.Name != "" {
			where += fmt.Sprintf(" (%s)", t.Name)
		}
		if t.Subject == "" {
			errs = append(errs, fmt.Errorf("%s.Subject is required", where))
		}
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("%s.SHA256 must be 64 hex characters (the SHA-256 of the token)", where))
		} else if j, dup := seen[hex.EncodeToString(b)]; dup {
			errs = append(errs, fmt.Errorf("%s.SHA256 is the same as Config.Tokens[%d].SHA256", where, j))
		} else {
			seen[hex.EncodeToString(b)] = i
		}
		if len(t.Roles) == 0 {
			errs = append(errs, fmt.Errorf("%s.Roles must list at least one of %s", where, strings.Join(directory.Roles, ", ")))
		}
		for _, r := range t.Roles {
			if !slices.Contains(directory.Roles, r) {
				errs = append(errs, fmt.Errorf("%s.Roles: unknown role %q (%s)", where, r, strings.Join(directory.Roles, ", ")))
			}
		}
		for _, tenant := range t.Tenants {
			if tenant == "" {
				errs = append(errs, fmt.Errorf("%s.Tenants: a tenant must not be empty", where))
			}
		}
		for _, a := range t.Agents {
			if _, err := path.Match(a, ""); err != nil || a == "" {
				errs = append(errs, fmt.Errorf("%s.Agents: %q is not a pattern of agent ids (billing-*)", where, a))
			}
		}
	}
	return errors.Join(errs...)
}

// HashToken returns the lowercase hex SHA-256 of a bearer token: the form in
// which tokens are configured.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// NewToken returns a new random bearer token ("cs_" and 32 random bytes,
// base64url) and its hash for the configuration.
func NewToken() (token, hash string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("api: random token: %w", err)
	}
	token = "cs_" + base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token), nil
}

package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
)

// This file is request integrity: the arbiter does not take a request's
// snapshot on trust. Holding the credential that publishes requests is not
// a right to decide what a call needs; the policy version the request names
// is. Every request is checked against that version's decision for its call
// (policy.VerifyRequest), and a request that asks for less is refused: its
// record is created already rejected, by "countersign", with the outcome
// reason "request_refused:<refusal>", so it can never be approved, and a
// run waiting on it is told at once.

// PolicySet gives policies an arbiter trusts without reading them from the
// hitl_policy bucket.
type PolicySet interface {
	// Policy returns the policy with the version, or nil.
	Policy(version string) *policy.Policy
}

// Policies is a fixed PolicySet: for a Gate that serves a policy from memory
// (orchestrator.StaticPolicy, a PolicyStore's fallback), list its policy
// here so that the arbiter knows what the gate's requests were decided by.
type Policies []*policy.Policy

// Policy returns the first policy with the version, or nil.
func (ps Policies) Policy(version string) *policy.Policy {
	for _, p := range ps {
		if p != nil && p.Version() == version {
			return p
		}
	}
	return nil
}

// maxRefusalDetail bounds the words kept in a refused request's outcome.
const maxRefusalDetail = 1024

// refusal is why a request is refused: one of the contract's refusals and
// what is wrong, in words.
type refusal struct {
	reason, detail string
}

// RefusedRecord is the record of a request the arbiter refused: rejected
// from the start, decided by "countersign", with the outcome reason
// "request_refused:<refusal>" and detail as the comment.
func RefusedRecord(req contracts.ApprovalRequested, reason, detail string, now time.Time) contracts.Record {
	rec := approval.NewRecord(req, now)
	rec.Status = contracts.StatusRejected
	rec.Outcome = &contracts.Outcome{
		Decision: contracts.DecisionReject, DecidedBy: []string{contracts.DecidedByCountersign}, DecidedAt: now,
		Reason: contracts.ReasonRequestRefused + ":" + reason, Comment: detail,
	}
	return rec
}

// policyBook finds the policy version a request names: a trusted one, the
// built-in default, or an applied one read from hitl_policy (kept once read:
// an applied version never changes).
type policyBook struct {
	js      jetstream.JetStream
	trusted PolicySet
	builtin *policy.Policy

	mu     sync.Mutex
	kv     jetstream.KeyValue // opened at the first read
	stored map[string]*policy.Policy
	// keys, when set, is the watched directory and live version.
	keys *liveKeys
}

func newPolicyBook(js jetstream.JetStream, trusted PolicySet) *policyBook {
	return &policyBook{js: js, trusted: trusted, builtin: policy.Default(), stored: map[string]*policy.Policy{}}
}

// bucket opens hitl_policy once.
func (b *policyBook) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kv == nil {
		kv, err := b.js.KeyValue(ctx, contracts.BucketPolicy)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", contracts.BucketPolicy, err)
		}
		b.kv = kv
	}
	return b.kv, nil
}

// find returns the policy with the version, a refusal when there is none,
// or an error when the bucket could not be read (the request is retried).
func (b *policyBook) find(ctx context.Context, version string) (*policy.Policy, *refusal, error) {
	if b.trusted != nil {
		if p := b.trusted.Policy(version); p != nil {
			return p, nil, nil
		}
	}
	if version == b.builtin.Version() {
		return b.builtin, nil, nil
	}
	b.mu.Lock()
	p := b.stored[version]
	b.mu.Unlock()
	if p != nil {
		return p, nil, nil
	}
	unknown := func(detail string) *refusal {
		return &refusal{reason: contracts.RefusalUnknownPolicyVersion, detail: detail}
	}
	if version == "" {
		return nil, unknown("the request names no policy version"), nil
	}
	kv, err := b.bucket(ctx)
	if err != nil {
		return nil, nil, err
	}
	doc, err := orchestrator.ReadPolicyVersion(ctx, kv, version)
	switch {
	case errors.Is(err, orchestrator.ErrUnknownPolicyVersion):
		return nil, unknown(fmt.Sprintf("policy version %q was never applied (%v)", version, err)), nil
	case err != nil:
		return nil, nil, err
	}
	p, err = policy.Parse([]byte(doc.Source))
	if err != nil || p.Version() != version {
		// Fail closed: what cannot be read here vouches for nothing.
		return nil, unknown(fmt.Sprintf("policy version %q is stored but does not compile here: %v", version, err)), nil
	}
	b.mu.Lock()
	b.stored[version] = p
	b.mu.Unlock()
	return p, nil, nil
}

// live returns the live policy version applied to hitl_policy, or "" when
// none was ever applied.
func (b *policyBook) live(ctx context.Context) (string, error) {
	kv, err := b.bucket(ctx)
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, orchestrator.PolicyKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read the live policy: %w", err)
	}
	var doc struct {
		Spec    string `json:"spec"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal(e.Value(), &doc); err != nil || doc.Spec != orchestrator.SpecPolicyDocument || doc.Version == "" {
		return "", fmt.Errorf("the live policy's document is unreadable (spec %q): %v", doc.Spec, err)
	}
	return doc.Version, nil
}

// directory returns the live directory (contracts.DirectoryKey): the
// watched one (liveKeys) once its watch is ready, else read now —
// nil when none was ever published. A document that cannot be read fails
// the operation (it is retried), never lets everyone through.
func (b *policyBook) directory(ctx context.Context) (*approval.Roster, error) {
	if b.keys != nil {
		if r, ok := b.keys.directory(); ok {
			return r, nil
		}
	}
	kv, err := b.bucket(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil // no bucket, no directory: the records alone say
	}
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, contracts.DirectoryKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the directory: %w", err)
	}
	r, err := approval.ParseRoster(e.Value())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", contracts.BucketPolicy, err)
	}
	return r, nil
}

// verify checks req, stored by the bus at stored, against the policy
// version it names and, when another version is live, against the live one
// too: a request is held to the stricter of the two, so naming an older
// or the built-in version (which counts only while no policy was ever
// applied) buys no weaker gate. The approvers a rule names by group are
// checked against the live directory's members. nil accepts it.
func (a *Arbiter) verify(ctx context.Context, req *contracts.ApprovalRequested, stored time.Time) (*refusal, error) {
	p, ref, err := a.policies.find(ctx, req.Policy.Version)
	if err != nil || ref != nil {
		return ref, err
	}
	roster, err := a.policies.directory(ctx)
	if err != nil {
		return nil, err
	}
	opts := policy.VerifyOptions{Stored: stored, Retention: a.cfg.Retention, ClockSkew: a.cfg.ClockSkew}
	if roster != nil {
		opts.Members = roster.Members
	}
	in := policy.RequestInput(req)
	if ref := verifyAgainst(req, p.EvaluateContext(ctx, in), opts); ref != nil {
		return ref, nil
	}
	// The watched live version spares a read when the request names it;
	// any other is checked against the bucket as it is now.
	if v, ok := a.policies.keys.liveVersion(); ok && v == req.Policy.Version {
		return nil, nil
	}
	liveVersion, err := a.policies.live(ctx)
	if err != nil || liveVersion == "" || liveVersion == req.Policy.Version {
		return nil, err
	}
	live, ref, err := a.policies.find(ctx, liveVersion)
	if err != nil || ref != nil {
		return ref, err
	}
	opts.Stricter = true
	return verifyAgainst(req, live.EvaluateContext(ctx, in), opts), nil
}

// verifyAgainst is VerifyRequest's refusal, if any.
func verifyAgainst(req *contracts.ApprovalRequested, d policy.Decision, opts policy.VerifyOptions) *refusal {
	err := policy.VerifyRequest(req, d, opts)
	if err == nil {
		return nil
	}
	var re *policy.RequestError
	if !errors.As(err, &re) {
		return &refusal{reason: contracts.RefusalWeakerThanPolicy, detail: err.Error()}
	}
	return &refusal{reason: re.Reason, detail: requestRefusalDetail(d.Version, re.Problems)}
}

// requestRefusalDetail says in words, within maxRefusalDetail bytes, what a refused
// request lacks.
func requestRefusalDetail(version string, problems []string) string {
	s := "Refused against policy version " + version + ": " + strings.Join(problems, "; ")
	if len(s) > maxRefusalDetail {
		cut := maxRefusalDetail - len("…")
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// refuse records a refused request as a rejected record, announces it, and
// makes it visible: a metric by refusal, a warning in the log.
func (a *Arbiter) refuse(ctx context.Context, req contracts.ApprovalRequested, ref *refusal) error {
	rec := RefusedRecord(req, ref.reason, ref.detail, a.cfg.Now())
	data, err := json.Marshal(rec)
	if err != nil {
		return events.Poison(err)
	}
	log := a.cfg.Logger.With("event_id", req.EventID, "run_id", req.Run.ID, "agent", req.Run.Agent,
		"policy_version", req.Policy.Version, "rule", req.Policy.Rule, "refusal", ref.reason, "detail", ref.detail,
		"trace_id", contracts.TraceID(req.Traceparent))
	rev, err := a.writer.Create(ctx, req.EventID, data, &rec)
	if errors.Is(err, jetstream.ErrKeyExists) {
		cur, err := a.existing(ctx, req.EventID)
		if err != nil {
			return err
		}
		if _, again := contracts.RequestRefusal(cur.Outcome); !again {
			// The event id already has a record, which stands as it is.
			a.m.requestsRefused.WithLabelValues(ref.reason).Inc()
			log.Warn("approval request refused: it does not match the policy version it names; the approval's existing record stands")
		}
		return nil
	}
	if err != nil {
		return err
	}
	a.m.requestsRefused.WithLabelValues(ref.reason).Inc()
	log.Warn("approval request refused: it does not match the policy version it names; recorded as rejected")
	if err := a.auditRecord(ctx, audit.ChangeCreated, &rec, rev); err != nil {
		return err
	}
	return a.announce(ctx, rec, rev)
}

package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/history"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Verdicts returned for a tool call.
const (
	VerdictAllowed         = "allowed"
	VerdictDenied          = "denied"
	VerdictResponded       = "responded"
	VerdictAnswered        = "answered"
	VerdictExpired         = "expired"
	VerdictCancelled       = "cancelled"
	VerdictAlreadyExecuted = "already_executed"
	// VerdictPending is only reported by Submit: a human has not decided yet.
	VerdictPending = "pending"
)

// CodeRequestRefused is the Code of a verdict or answer whose approval
// request Countersign refused: the request asked for less than the policy
// version it names gives (or named none), so nobody could approve it. It
// is denied, never run.
const CodeRequestRefused = contracts.ReasonRequestRefused

// RefusedReason is the message for the model about a refused request.
func RefusedReason(refusal string) string {
	return "Countersign refused the approval request for this call (" + refusal +
		"): it does not match the policy in force, so it was not run. Tell an operator."
}

// ErrTooLarge: arguments, a schema or a question do not fit the size budget
// the server's max payload allows (contracts.Limits); nothing was
// published. It is contracts.ErrTooLarge (code too_large): match it with
// errors.Is, and read the field with errors.As on *contracts.FieldError.
var ErrTooLarge = contracts.ErrTooLarge

// EventNamespace is the UUIDv5 namespace of derived event ids.
var EventNamespace = uuid.MustParse("886a1d92-e7fc-5f25-afdd-55b3e40e8255")

// EventID derives the approval id of a tool call: UUIDv5 over tenant,
// agent, run id and tool call id when both ids are given, else a new UUIDv7.
func EventID(run contracts.Run, toolCallID string) string {
	if run.ID != "" && toolCallID != "" {
		name := run.Tenant + "\n" + run.Agent + "\n" + run.ID + "\n" + toolCallID
		return uuid.NewSHA1(EventNamespace, []byte(name)).String()
	}
	return uuid.Must(uuid.NewV7()).String()
}

// ToolCall is one call the agent proposes.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// Schema is the tool's JSON Schema for its arguments (optional). It goes
	// into the request as tool_schema; a human's edit must satisfy it.
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Verdict is the answer for one tool call.
type Verdict struct {
	ToolCallID string `json:"tool_call_id"`
	Verdict    string `json:"verdict"`
	EventID    string `json:"event_id,omitempty"`
	// Reason is a message the agent can hand the model as the tool result
	// when the call does not run.
	Reason string `json:"reason,omitempty"`
	// Code is a stable code for a verdict the agent may want to branch on:
	// CodeRequestRefused when Countersign refused the approval request
	// itself (the call is denied; the record's outcome reason says why).
	Code string `json:"code,omitempty"`
	Rule string `json:"rule,omitempty"`
	// Arguments are the arguments to run with (possibly edited by a human),
	// or the answer of a human_input request.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Edited says a human approved other arguments than the agent proposed;
	// Diff is the change, an RFC 6902 JSON Patch from the proposed ones.
	Edited bool            `json:"edited,omitempty"`
	Diff   json.RawMessage `json:"diff,omitempty"`
	// GrantID names the standing grant that allowed the call without a
	// new request (its use is in the grant's timeline); "" otherwise.
	GrantID string `json:"grant_id,omitempty"`
	// Shadow is what the policy's shadow rules would have decided for the
	// call (never enforced); a gated call's request records it too.
	Shadow []contracts.ShadowVerdict `json:"shadow,omitempty"`
	// Permit must be claimed right before an allowed call runs. Only an
	// allowed verdict carries one; every other verdict has none.
	Permit *Permit `json:"-"`

	// sha is the hash of the arguments under review, to match the outcome.
	sha string
	// A pending verdict whose record's request is known to be this call's
	// (known: the gate read the pending record and checked it, or the
	// stream stored the gate's own request as new) also knows what of that
	// request a verdict depends on, besides sha and Rule: the principal
	// that claims (by) and how long an approval stays claimable. A
	// decided announcement then answers the call without a read of the
	// record (decidedVerdict).
	known       bool
	by          string
	claimWithin time.Duration
}

// PolicySource gives the policy in force; it may change at any time.
type PolicySource interface {
	Current() *policy.Policy
}

// StaticPolicy is a PolicySource that never changes.
type StaticPolicy struct{ P *policy.Policy }

// Current returns the policy.
func (s StaticPolicy) Current() *policy.Policy { return s.P }

// Config wires a Gate.
type Config struct {
	JS jetstream.JetStream
	// Policy in force (default: the fleet's live policy, applied to
	// hitl_policy with 'countersign policy apply', followed as it changes;
	// until one is applied, or where the bucket does not exist, every call
	// requires approval). The arbiter holds every request to the live
	// policy, so a gate on another one has its requests refused.
	Policy PolicySource
	// Waiter shared by every Gate of the process; one is created if nil.
	Waiter *Waiter
	Logger *slog.Logger
	Now    func() time.Time
	// Retention caps request timeouts (default 30 days).
	Retention time.Duration
	// Directory resolves "group:NAME" approvers that the policy does not
	// define to the group's members when a request is created (optional).
	// Groups neither knows stay as written: nobody can approve as them.
	Directory directory.Source
	// Grants is the process's book of standing grants, shared by every
	// Gate of the process; one is opened if nil.
	Grants *GrantBook
	// Registerer receives the gate's metrics (grant uses) when set.
	Registerer prometheus.Registerer
	// History is the process's window of the history of reviewed calls
	// (history conditions), shared by every Gate of the process; one is
	// opened if nil and the HITL_HISTORY stream exists. Without one, a
	// history condition errors and its call gets the strictest rule.
	History *history.Store
}

// Gate reviews tool calls against the policy and waits for humans.
type Gate struct {
	cfg       Config
	kv        jetstream.KeyValue
	waiter    *Waiter
	ownWait   bool
	grants    *GrantBook
	ownGrants bool
	gm        grantMetrics
	sm        shadowMetrics
	claims    events.RequestPath
	hist      gateHistory
	receipts  *Receipts
	// store is the live policy the gate follows when Config.Policy was
	// not set.
	store *PolicyStore
}

func (c *Config) setDefaults() {
	if c.Policy == nil {
		c.Policy = StaticPolicy{P: policy.Default()}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Retention == 0 {
		c.Retention = events.DefaultRetention
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("orchestrator: Config.JS is required"))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("orchestrator: Config.Retention must be positive, got %s", c.Retention))
	}
	if p, ok := c.Policy.(StaticPolicy); ok && p.P == nil {
		errs = append(errs, errors.New("orchestrator: Config.Policy is a StaticPolicy without a policy"))
	}
	return errors.Join(errs...)
}

// NewGate returns a Gate. The streams and bucket must exist (events.Provision).
func NewGate(ctx context.Context, cfg Config) (*Gate, error) {
	var store *PolicyStore
	if cfg.Policy == nil && cfg.JS != nil {
		s, err := OpenPolicyStore(ctx, PolicyStoreConfig{JS: cfg.JS, Logger: cfg.Logger})
		switch {
		case err == nil:
			store, cfg.Policy = s, s
		case errors.Is(err, jetstream.ErrBucketNotFound):
			// Nothing can be applied: the built-in default.
		default:
			return nil, err
		}
	}
	closeStore := func() {
		if store != nil {
			_ = store.Close()
		}
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		closeStore()
		return nil, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketApprovals, err)
	}
	g := &Gate{cfg: cfg, kv: kv, waiter: cfg.Waiter, grants: cfg.Grants, gm: newGrantMetrics(cfg.Registerer), sm: newShadowMetrics(cfg.Registerer), store: store,
		receipts: &Receipts{JS: cfg.JS}}
	if g.grants == nil {
		if g.grants, err = NewGrantBook(ctx, cfg.JS, cfg.Logger); err != nil {
			closeStore()
			return nil, err
		}
		g.ownGrants = true
	}
	if g.waiter == nil {
		if g.waiter, err = NewWaiter(ctx, cfg.JS, cfg.Logger); err != nil {
			if g.ownGrants {
				_ = g.grants.Close()
			}
			closeStore()
			return nil, err
		}
		g.ownWait = true
	}
	if err := g.openHistory(ctx); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// limits is the size budget of the server the gate publishes to.
func (g *Gate) limits() contracts.Limits {
	return contracts.LimitsFor(g.cfg.JS.Conn().MaxPayload())
}

// Waiter returns the gate's waiter.
func (g *Gate) Waiter() *Waiter { return g.waiter }

// Grants returns the gate's book of standing grants.
func (g *Gate) Grants() *GrantBook { return g.grants }

// Close releases the waiter and the grant book if the gate created them.
func (g *Gate) Close() error {
	var errs []error
	if g.ownGrants {
		errs = append(errs, g.grants.Close())
	}
	if g.ownWait {
		errs = append(errs, g.waiter.Close())
	}
	if g.store != nil {
		errs = append(errs, g.store.Close())
	}
	errs = append(errs, g.closeHistory())
	return errors.Join(errs...)
}

// Review decides every call and blocks until each gated call has a terminal
// verdict or ctx ends. Calling it again with the same run and tool call ids
// (after a crash, say) re-attaches to the same approvals.
func (g *Gate) Review(ctx context.Context, run contracts.Run, calls []ToolCall) ([]Verdict, error) {
	type result struct {
		v   []Verdict
		err error
	}
	ch := make(chan result, 1)
	if err := g.ReviewAsync(ctx, run, calls, func(v []Verdict, err error) { ch <- result{v, err} }); err != nil {
		return nil, err
	}
	r := <-ch
	return r.v, r.err
}

// ReviewAsync submits the calls and calls done once with every verdict, or
// with ctx's error if ctx ends first. It starts no goroutine while a review
// waits: a runtime can hold any number of pending reviews cheaply. done runs
// on a goroutine of its own once the review is over (on the caller's when
// nothing had to wait), so a slow or blocking done never holds up other
// waits.
func (g *Gate) ReviewAsync(ctx context.Context, run contracts.Run, calls []ToolCall, done func([]Verdict, error)) error {
	r := &asyncReview{done: done}
	// Each gated call's wait registers before the gate reads the call's
	// record, and starts from that read: one read a call, and a decision
	// that lands in between is seen by the read or by the wait. A wait
	// calls back only once begun, after every verdict is known.
	arms := make([]*wait, len(calls))
	verdicts, err := g.submit(ctx, run, calls, func(i int, eventID string) (*wait, error) {
		a, err := g.waiter.arm(eventID, onDecided, &reviewCall{g: g, r: r, i: i})
		arms[i] = a
		return a, err
	})
	if err != nil {
		for _, a := range arms {
			if a != nil {
				a.cancel()
			}
		}
		return err
	}
	r.verdicts = verdicts
	// gate ended the wait of every call it did not leave pending.
	for i, v := range verdicts {
		if v.Verdict == VerdictPending {
			r.left++
			r.cancels = append(r.cancels, arms[i].cancel)
		}
	}
	if r.left == 0 {
		done(verdicts, nil)
		return nil
	}
	for i, v := range verdicts {
		if v.Verdict == VerdictPending {
			arms[i].begin() // may finish the review: mu is not held
		}
	}
	r.endWith(ctx)
	return nil
}

// asyncReview is one review waiting for its pending calls' verdicts.
type asyncReview struct {
	done func([]Verdict, error)

	mu       sync.Mutex
	verdicts []Verdict
	left     int      // pending verdicts still to come
	cancels  []func() // the watches to cancel when the review is over
	fired    bool     // done has been called
	stop     func() bool
}

// reviewCall is the wait of the review's call i (a waitHandler): the
// verdict comes from its terminal record or, without reading the record,
// from the record's decided announcement (decidedVerdict). It is called
// only once the wait began, after every verdict is known.
type reviewCall struct {
	g *Gate
	r *asyncReview
	i int
}

func (c *reviewCall) changed(rec *contracts.Record, _ uint64) bool {
	if !rec.Terminal() {
		return false
	}
	p := c.r.pending(c.i)
	c.r.decided(c.i, c.g.verdictFor(rec, p.ToolCallID, p.sha))
	return true
}

func (c *reviewCall) decided(d *contracts.Decided) bool {
	v, ok := c.g.decidedVerdict(d, c.r.pending(c.i))
	if ok {
		c.r.decided(c.i, v)
	}
	return ok
}

// pending is verdicts[i] while it is pending.
func (r *asyncReview) pending(i int) Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdicts[i]
}

// decided records verdicts[i] and finishes the review with the last one.
func (r *asyncReview) decided(i int, v Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fired {
		return
	}
	r.verdicts[i] = v
	r.left--
	if r.left == 0 {
		r.finish(nil)
	}
}

// endWith finishes the review with ctx's error when ctx ends first.
func (r *asyncReview) endWith(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fired {
		r.stop = context.AfterFunc(ctx, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.finish(ctx.Err())
		})
	}
}

// finish reports once; it is called with mu held.
func (r *asyncReview) finish(err error) {
	if r.fired {
		return
	}
	r.fired = true
	for _, c := range r.cancels {
		c()
	}
	if r.stop != nil {
		r.stop()
	}
	if err != nil {
		go r.done(nil, err)
		return
	}
	go r.done(r.verdicts, nil)
}

// Submit decides every call and publishes the gated ones without waiting:
// gated calls not yet decided get VerdictPending with their event id.
func (g *Gate) Submit(ctx context.Context, run contracts.Run, calls []ToolCall) ([]Verdict, error) {
	return g.submit(ctx, run, calls, nil)
}

// armFunc registers a wait for calls[i], whose event id is eventID, before
// the gate reads its record (see ReviewAsync).
type armFunc func(i int, eventID string) (*wait, error)

// submit is Submit; with arm, each gated call's wait registers before its
// record is read, and a call left pending keeps its wait, handed the
// record read (if there was one), for the caller to begin.
func (g *Gate) submit(ctx context.Context, run contracts.Run, calls []ToolCall, arm armFunc) ([]Verdict, error) {
	if run.Agent == "" {
		return nil, errors.New("orchestrator: run.agent is required")
	}
	pol := g.cfg.Policy.Current()
	out := make([]Verdict, len(calls))
	seen := map[string]bool{}
	lim := g.limits()
	canon := make([]json.RawMessage, len(calls))
	hashes := make([]string, len(calls))
	// Every call is checked before any is published, so a bad call never
	// leaves the calls before it half submitted.
	for i, c := range calls {
		if c.Name == "" {
			return nil, fieldErr(ErrInvalidField, fmt.Sprintf("tool_calls[%d].name", i), nil, "tool_calls[%d].name is required", i)
		}
		if c.ID != "" {
			if seen[c.ID] {
				return nil, fieldErr(ErrInvalidField, fmt.Sprintf("tool_calls[%d].id", i), nil, "tool_calls[%d].id %q is used twice", i, c.ID)
			}
			seen[c.ID] = true
		}
		args, sha, err := canonicalArgs(c.Arguments)
		if err != nil {
			return nil, fieldErr(ErrInvalidArguments, fmt.Sprintf("tool_calls[%d].arguments", i), err, "%s", err.Message)
		}
		if err := checkSchema(c.Schema); err != nil {
			return nil, fieldErr(ErrInvalidSchema, fmt.Sprintf("tool_calls[%d].schema", i), err, "%s", err.Message)
		}
		if e := lim.CheckRequestFields(&contracts.ApprovalRequested{
			ToolCall: &contracts.ToolCall{Arguments: args}, ToolSchema: compactJSON(c.Schema),
		}); e != nil {
			return nil, fmt.Errorf("orchestrator: tool_calls[%d]: %w", i, e)
		}
		canon[i], hashes[i] = args, sha
	}
	for i, c := range calls {
		args, sha := canon[i], hashes[i]
		var err error
		// Shadow rules never change d (see policy.EvaluateShadow).
		eventID := EventID(run, c.ID)
		d, shadow, figs := g.decide(ctx, pol, policy.Input{Run: run, Tool: c.Name, Arguments: args}, eventID)
		g.sm.count(d, shadow)
		v := Verdict{ToolCallID: c.ID, Rule: d.Rule}
		switch d.Action {
		case policy.ActionAllow:
			v.Verdict, v.Arguments, v.Permit = VerdictAllowed, args, &Permit{byPolicy: true, sha: sha, args: args}
			if d.Receipt {
				v.Permit.attest = policyReceipt(run, c, sha, d)
			}
		case policy.ActionDeny:
			v.Verdict, v.Reason = VerdictDenied, d.Reason
		default:
			var armCall func(string) (*wait, error)
			if arm != nil {
				armCall = func(eventID string) (*wait, error) { return arm(i, eventID) }
			}
			v, err = g.gate(ctx, run, c, args, sha, d, requestExtras{eventID, policy.ShadowContracts(shadow), figs}, armCall)
			if err != nil {
				return nil, fmt.Errorf("orchestrator: tool_calls[%d]: %w", i, err)
			}
		}
		v.Shadow = policy.ShadowContracts(shadow)
		out[i] = v
	}
	return out, nil
}

// canonicalArgs checks that raw is a JSON object and returns its canonical
// form and hash. Missing arguments are an empty object.
func canonicalArgs(raw json.RawMessage) (json.RawMessage, string, *Error) {
	trimmed := strings.TrimSpace(string(raw))
	if trimmed == "" || trimmed == "null" {
		raw = json.RawMessage(`{}`)
	} else if trimmed[0] != '{' {
		return nil, "", ErrInvalidArguments
	}
	if big, ok := errors.AsType[*contracts.UnsafeIntegerError](contracts.CheckIJSON(raw)); ok {
		return nil, "", fieldErr(ErrInvalidArguments, big.Path, big, "%v", big)
	}
	canon, err := contracts.Canonicalize(raw)
	if err != nil {
		return nil, "", fieldErr(ErrInvalidArguments, "", err, "tool call arguments must be a JSON object: %v", err)
	}
	return canon, contracts.CanonicalSHA256(canon), nil
}

// gate re-attaches to the call's approval or requests a new one. With arm,
// the call's wait registers before the record is read; a call left pending
// keeps it, handed the record read if there was one, and every other
// outcome ends it.
func (g *Gate) gate(ctx context.Context, run contracts.Run, c ToolCall, args json.RawMessage, sha string, d policy.Decision,
	x requestExtras, arm func(string) (*wait, error)) (v Verdict, err error) {
	eventID := x.eventID
	v = Verdict{ToolCallID: c.ID, EventID: eventID, Rule: d.Rule, Verdict: VerdictPending, sha: sha}
	var a *wait
	if arm != nil {
		if a, err = arm(eventID); err != nil {
			return v, err
		}
		defer func() {
			if err != nil || v.Verdict != VerdictPending {
				a.cancel()
			}
		}()
	}
	entry, err := g.kv.Get(ctx, eventID)
	switch {
	case err == nil:
		var rec contracts.Record
		if err := contracts.DecodeRecord(eventID, entry.Value(), &rec); err != nil {
			return v, fmt.Errorf("record %s is unreadable: %w", eventID, err)
		}
		// Only the request's submitter learns whether the arguments are
		// the same: anyone else is answered alike either way, so a guess
		// of the arguments is never confirmed.
		if rec.Request.ToolCall == nil || rec.Request.ToolCall.ArgumentsSHA256 != sha || !sameSubmitter(ctx, &rec) {
			return v, ErrArgumentsChanged
		}
		v.Rule = rec.Request.Policy.Rule
		if rec.Terminal() {
			return g.verdictFor(&rec, c.ID, sha), nil
		}
		v.known, v.by, v.claimWithin = true, claimant(&rec.Request), approval.ClaimWithin(&rec.Request)
		if a != nil {
			a.changed(&rec, entry.Revision()) // kept until begin
		}
		return v, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return v, fmt.Errorf("read record %s: %w", eventID, err)
	}
	// A standing grant may cover the call: then it runs without a request.
	if gv, ok := g.grantVerdict(ctx, run, c, args, sha, d, eventID); ok {
		return gv, nil
	}
	req := g.request(run, c, args, sha, d, eventID)
	req.Traceparent = contracts.TraceparentFrom(ctx)
	req.Submitter = submitterFrom(ctx)
	req.Shadow = x.shadow
	req.History = x.history
	data, err := g.limits().EncodeRequest(&req)
	if errors.Is(err, ErrTooLarge) && req.Shadow != nil {
		// The shadow verdicts are a report: a request they would make too
		// large goes without them, as it would without shadow rules.
		req.Shadow = nil
		data, err = g.limits().EncodeRequest(&req)
	}
	if err != nil {
		return v, err
	}
	ack, err := events.PublishRaw(ctx, g.cfg.JS, contracts.ToolRequestedSubject(run.Agent), data, eventID, nil)
	if err != nil {
		return v, err
	}
	// A duplicate was stored before by someone else's publish of the same
	// event id, perhaps with other arguments: what the record holds is
	// then known only from a read.
	if ack != nil && !ack.Duplicate {
		v.known, v.by, v.claimWithin = true, claimant(&req), approval.ClaimWithin(&req)
	}
	return v, nil
}

// claimant is the principal that claims an approval of req: its submitter,
// else its agent (see verdictFor).
func claimant(req *contracts.ApprovalRequested) string {
	if req.Submitter != "" {
		return req.Submitter
	}
	return req.Run.Agent
}

func (g *Gate) request(run contracts.Run, c ToolCall, args json.RawMessage, sha string, d policy.Decision, eventID string) contracts.ApprovalRequested {
	now := g.cfg.Now().UTC()
	timeout := min(d.Timeout, g.cfg.Retention)
	// Values the rule or the tool schema marks are masked wherever the
	// request leaves Countersign, the summary included.
	sensitive := d.SensitivePointers(args, c.Schema)
	return contracts.ApprovalRequested{
		Spec:       contracts.SpecApprovalRequested,
		EventID:    eventID,
		Kind:       contracts.KindToolApproval,
		Run:        run,
		ToolCall:   &contracts.ToolCall{ID: c.ID, Name: c.Name, Arguments: args, ArgumentsSHA256: sha},
		ToolSchema: compactJSON(c.Schema),
		Risk:       d.Risk,
		Summary:    Summary(d.Summary, run, c.Name, approval.Redact(args, sensitive)),
		Policy:     contracts.PolicyRef{Rule: d.Rule, Version: d.Version, Error: d.Error},
		Quorum: contracts.Quorum{
			Required: d.Quorum, Approvers: g.approvers(d.Approvers, d.Quorum, eventID), Veto: d.Veto,
			AllowSelfApproval: d.AllowSelfApproval, Order: orderOf(d.Order),
		},
		Escalation:       g.escalation(d.Escalation, eventID),
		Reminders:        durations(d.Reminders),
		AllowedDecisions: nonNil(d.AllowedDecisions),
		Channels:         nonNil(d.Channels),
		Notify:           slices.Clone(d.Notify),
		ExpiresAt:        now.Add(timeout),
		OnTimeout:        d.OnTimeout,
		ClaimWithin:      claimWithin(d.ClaimWithin),
		CreatedAt:        now,
		Sensitive:        sensitive,
		Grants:           d.Grants,
		StepUp:           d.StepUp,
	}
}

// approvers freezes an approver list for a request snapshot: "group:NAME"
// entries the policy left (groups it does not define) become the members
// the directory lists now. A group nobody resolves stays as written, which
// is nobody's id, so the request fails closed; that is logged, as is a
// quorum the resolved approvers cannot meet.
func (g *Gate) approvers(list []string, quorum int, eventID string) []string {
	if !slices.ContainsFunc(list, func(a string) bool { return strings.HasPrefix(a, directory.GroupPrefix) }) {
		return nonNil(list)
	}
	var dir *directory.Directory
	if g.cfg.Directory != nil {
		dir = g.cfg.Directory.Current()
	}
	ids, unknown := dir.ResolveApprovers(list)
	if len(unknown) > 0 {
		g.cfg.Logger.Warn("approver groups that neither the policy nor the directory lists members of; nobody can approve as them",
			"event_id", eventID, "groups", strings.Join(unknown, ","), "directory", dir != nil)
	}
	if people := len(ids) - len(unknown); quorum > people {
		g.cfg.Logger.Warn("the request's quorum cannot be met by its approvers; it can only be rejected, cancelled or expire",
			"event_id", eventID, "quorum", quorum, "approvers", people)
	}
	return ids
}

// escalation freezes the policy's escalation tiers for a request snapshot:
// each tier's groups become their members now, as for the approvers.
func (g *Gate) escalation(tiers []policy.EscalationTier, eventID string) []contracts.EscalationTier {
	out := make([]contracts.EscalationTier, len(tiers))
	for i, t := range tiers {
		out[i] = contracts.EscalationTier{
			After:     t.After.String(),
			Approvers: g.approvers(t.Approvers, 0, eventID),
			Channels:  nonNil(t.Channels),
		}
	}
	return out
}

// durations writes durations in Go syntax ("10m0s").
func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

func orderOf(o string) string {
	if o == contracts.OrderSequence {
		return contracts.OrderSequence
	}
	return contracts.OrderAny
}

// Explain says how the policy in force decides one call: the decision and,
// rule by rule, why it matched or not. It publishes nothing.
func (g *Gate) Explain(run contracts.Run, call ToolCall) (policy.Decision, []policy.Step, error) {
	args, _, err := canonicalArgs(call.Arguments)
	if err != nil {
		return policy.Decision{}, nil, err
	}
	in := policy.Input{Run: run, Tool: call.Name, Arguments: args}
	pol := g.cfg.Policy.Current()
	if h, err := g.historyFor(context.Background(), pol.HistoryUse()); err == nil && h != nil {
		in.History = h.View(history.Call{ID: EventID(run, call.ID), Tool: call.Name, Run: run, Arguments: args})
	}
	d, steps := pol.Explain(in)
	return d, steps, nil
}

// Policy is the policy in force.
func (g *Gate) Policy() *policy.Policy { return g.cfg.Policy.Current() }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Summary renders a rule's summary template: {{args.NAME}} is replaced by
// the top-level argument NAME, {{tool}} and {{agent}} by the call's. Without
// a template the summary names the agent and the tool.
func Summary(tmpl string, run contracts.Run, tool string, args json.RawMessage) string {
	if tmpl == "" {
		return fmt.Sprintf("%s wants to call %s", run.Agent, tool)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(args, &m)
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "{{")
		if i < 0 {
			b.WriteString(tmpl)
			break
		}
		j := strings.Index(tmpl[i:], "}}")
		if j < 0 {
			b.WriteString(tmpl)
			break
		}
		b.WriteString(tmpl[:i])
		key := strings.TrimSpace(tmpl[i+2 : i+j])
		switch {
		case key == "tool":
			b.WriteString(tool)
		case key == "agent":
			b.WriteString(run.Agent)
		case strings.HasPrefix(key, "args."):
			raw := m[strings.TrimPrefix(key, "args.")]
			var s string
			if json.Unmarshal(raw, &s) == nil {
				b.WriteString(s)
			} else {
				b.Write(raw)
			}
		}
		tmpl = tmpl[i+j+2:]
	}
	return b.String()
}

// verdictFor turns a terminal record into the verdict for the call whose
// arguments hash to sha, with a permit when it is allowed.
func (g *Gate) verdictFor(rec *contracts.Record, toolCallID, sha string) Verdict {
	v := VerdictFor(rec, toolCallID, sha)
	if v.Verdict == VerdictAllowed {
		// The permit claims as the agent principal that submitted the
		// request: the only one, besides an admin, the arbiter lets claim.
		v.Permit = &Permit{
			g: g, eventID: rec.Request.EventID, sha: rec.Outcome.ArgumentsSHA256, args: v.Arguments,
			by: claimant(&rec.Request), claimID: uuid.Must(uuid.NewV7()).String(),
		}
	}
	return v
}

// decidedVerdict is the verdict of pending call p from its record's decided
// announcement d, without reading the record: the verdict verdictFor gives
// for the record at d's revision, which holds d's status and outcome and
// the request p knows. ok is false, and the record must be read, when p
// does not know its record's request (p.known), when d is not for p's
// record, and when d alone cannot be trusted to give the same verdict: an
// approval of other arguments than p's (an edit: the read checks that the
// record's request is p's call before it lets the edited arguments run,
// and an announcement cannot show that), and an approval that may have
// lapsed (or been claimed since).
func (g *Gate) decidedVerdict(d *contracts.Decided, p Verdict) (Verdict, bool) {
	if !p.known || p.EventID == "" || d.EventID != p.EventID || d.Outcome == nil || !decidedStatus(d.Status) {
		return Verdict{}, false
	}
	rec := &contracts.Record{
		Request: contracts.ApprovalRequested{
			EventID: p.EventID, Kind: contracts.KindToolApproval, Policy: contracts.PolicyRef{Rule: p.Rule},
			ToolCall: &contracts.ToolCall{ArgumentsSHA256: p.sha}, Submitter: p.by, ClaimWithin: p.claimWithin.String(),
		},
		Status:  d.Status,
		Outcome: d.Outcome,
	}
	if d.Status == contracts.StatusApproved {
		out := d.Outcome
		if out.ArgumentsSHA256 != p.sha || len(out.Diff) != 0 {
			return Verdict{}, false
		}
		if approval.Lapsed(rec, time.Now()) {
			return Verdict{}, false
		}
	}
	return g.verdictFor(rec, p.ToolCallID, p.sha), true
}

// VerdictFor turns a terminal record into the verdict, with its message for
// the model, for the call whose arguments hash to sha: the one mapping the
// Go library and the HTTP API share. It carries no permit (see Gate).
func VerdictFor(rec *contracts.Record, toolCallID, sha string) Verdict {
	v := Verdict{ToolCallID: toolCallID, EventID: rec.Request.EventID, Rule: rec.Request.Policy.Rule}
	out := rec.Outcome
	if out == nil {
		out = &contracts.Outcome{}
	}
	switch rec.Status {
	case contracts.StatusApproved:
		if rec.Request.ToolCall == nil || rec.Request.ToolCall.ArgumentsSHA256 != sha {
			v.Verdict, v.Reason = VerdictDenied, "The approval on record is for other arguments; this call was not approved."
			return v
		}
		if rec.Claim != nil {
			v.Verdict = VerdictAlreadyExecuted
			v.Reason = AlreadyClaimedReason(rec.Claim)
			return v
		}
		if approval.Lapsed(rec, time.Now()) {
			v.Verdict, v.Code = VerdictExpired, contracts.ReasonApprovalLapsed
			v.Reason = "This call was approved, but not run within " + approval.ClaimWithin(&rec.Request).String() +
				" of the approval; the approval lapsed and the call was not run. Propose it again for a new decision."
			return v
		}
		// Copies: the record is shared with the process's other waits.
		v.Verdict, v.Arguments = VerdictAllowed, bytes.Clone(out.Arguments)
		if out.ArgumentsSHA256 != "" && out.ArgumentsSHA256 != sha {
			v.Edited, v.Diff = true, bytes.Clone(out.Diff)
		}
	case contracts.StatusRejected:
		v.Verdict = VerdictDenied
		if refusal, ok := contracts.RequestRefusal(out); ok {
			v.Code, v.Reason = CodeRequestRefused, RefusedReason(refusal)
			break
		}
		v.Reason = "A human reviewer rejected this tool call."
		if out.Comment != "" {
			v.Reason += " Reason: " + out.Comment
		}
	case contracts.StatusResponded:
		v.Verdict, v.Reason = VerdictResponded, out.Comment
	case contracts.StatusAnswered:
		v.Verdict, v.Arguments = VerdictAnswered, out.Arguments
	case contracts.StatusExpired:
		v.Verdict = VerdictExpired
		v.Reason = "No human decided on this tool call before its deadline; it was not run."
	case contracts.StatusCancelled:
		v.Verdict = VerdictCancelled
		v.Reason = "The approval request for this tool call was cancelled; it was not run."
	default:
		v.Verdict, v.Reason = VerdictDenied, "Unknown approval status "+rec.Status+"; failing closed."
	}
	return v
}

// AlreadyClaimedReason tells the agent what is known of an approval that
// was claimed before: that it was claimed, when and by which claim, and
// that whether the tool then ran is unknown (the claiming process may have
// died before or after running it). It never runs again.
func AlreadyClaimedReason(c *contracts.Claim) string {
	msg := "This approved call was already claimed"
	if c != nil {
		if !c.At.IsZero() {
			msg += " at " + c.At.UTC().Format(time.RFC3339)
		}
		if c.ClaimID != "" {
			msg += " (claim " + c.ClaimID + ")"
		}
	}
	return msg + "; Countersign does not know whether the tool then ran. It will not run again."
}

// Permit is the right to run one allowed call once. Only the gate makes
// permits: a zero Permit, or a nil one, is not a right to run anything.
type Permit struct {
	g        *Gate
	eventID  string
	sha      string
	args     json.RawMessage
	by       string
	claimID  string
	byPolicy bool
	// A permit from a standing grant: the grant, and the call as it was
	// checked against it.
	grantID   string
	grantCall approval.GrantCall
	grantIn   policy.Input
	// receipt is the signed receipt of the accepted claim (see Receipt).
	receipt atomic.Pointer[string]
	// attest are the claims of the receipt the HTTP API signs for a call
	// allowed without an approval (see ReceiptClaims); nil when none.
	attest *receipt.Claims
}

// ReceiptClaims are the claims of the receipt the HTTP API signs for a
// call allowed without an approval: by a policy rule that says receipt:
// true (basis policy), or by a standing grant (basis grant, naming the
// grant). It reports false for the permit of an approval, whose receipt
// the arbiter signs when the approval is claimed (see Receipt), and for a
// call the policy allows without asking for a receipt. The gate signs
// nothing itself: an agent's own process holds no signing key.
func (p *Permit) ReceiptClaims() (receipt.Claims, bool) {
	if p == nil || p.attest == nil {
		return receipt.Claims{}, false
	}
	c := *p.attest
	c.DecidedBy = slices.Clone(c.DecidedBy)
	return c, true
}

// policyReceipt are the claims of the receipt of a call the policy allows
// outright under a rule with receipt: true.
func policyReceipt(run contracts.Run, c ToolCall, sha string, d policy.Decision) *receipt.Claims {
	return &receipt.Claims{
		Tenant: run.Tenant, Agent: run.Agent, RunID: run.ID, ToolCallID: c.ID, Tool: c.Name,
		ArgsSHA256: sha, Basis: receipt.BasisPolicy, DecidedBy: []string{receipt.BasisPolicy},
		Rule: d.Rule, PolicyVersion: d.Version,
	}
}

// GrantID of the standing grant behind the permit ("" when none).
func (p *Permit) GrantID() string {
	if p == nil {
		return ""
	}
	return p.grantID
}

// EventID of the approval behind the permit ("" for a call the policy allows outright).
func (p *Permit) EventID() string {
	if p == nil {
		return ""
	}
	return p.eventID
}

// ClaimID is the id Claim uses: the same on every try of this permit, so
// a claim retried after a timeout or a lost answer is recognized as this
// permit's own. It is "" for a call the policy allows outright.
func (p *Permit) ClaimID() string {
	if p == nil {
		return ""
	}
	return p.claimID
}

// Receipt is the receipt the arbiter signed when this permit's claim was
// accepted ("" before a successful Claim, for a call the policy allows
// outright, or when the arbiter signs none): pass it to a tool that
// verifies receipts, in the Countersign-Receipt header (see
// contracts/receipt).
func (p *Permit) Receipt() string {
	if p == nil {
		return ""
	}
	if r := p.receipt.Load(); r != nil {
		return *r
	}
	return ""
}

// claimed tells from rec whether the claim claimID is settled (done) and
// how: nil for accepted, ErrAlreadyExecuted for
// another claim, ErrNotApproved for a record that is not approved for
// these arguments.
func (p *Permit) claimed(rec *contracts.Record, claimID string) (done bool, err error) {
	switch {
	case rec.Status != contracts.StatusApproved || rec.Outcome == nil || rec.Outcome.ArgumentsSHA256 != p.sha:
		return true, ErrNotApproved
	case rec.Claim == nil && rec.LapsedAt != nil:
		return true, ErrApprovalLapsed
	case rec.Claim == nil:
		return false, nil
	case rec.Claim.ClaimID == claimID:
		return true, nil
	}
	return true, ErrAlreadyExecuted
}

// Claim marks the approval as used, right before the call runs. It succeeds
// once per approval across the fleet; a claim from any other permit, in this
// or any other process, fails with ErrAlreadyExecuted. Calling Claim again on
// the same permit (after a timeout, say) succeeds if its first try took
// effect. A call the policy allows outright needs no claim and Claim
// returns nil; a nil or zero Permit fails with ErrNotApproved.
func (p *Permit) Claim(ctx context.Context) error {
	if p == nil {
		return ErrNotApproved
	}
	if p.byPolicy {
		return nil
	}
	if p.grantID != "" && p.g != nil {
		return p.claimGrant(ctx)
	}
	if p.g == nil || p.eventID == "" || p.claimID == "" {
		return ErrNotApproved
	}
	if canon, sha, err := canonicalArgs(p.args); err != nil || sha != p.sha || len(canon) == 0 {
		return ErrNotApproved
	}
	claimID := p.claimID
	cmd := contracts.Command{
		Spec: contracts.SpecCommand, CommandID: claimID, EventID: p.eventID, Command: contracts.CommandClaim,
		By: p.by, ClaimID: claimID, IssuedAt: p.g.cfg.Now().UTC(),
	}
	data, err := claimData(cmd)
	if err != nil {
		return err
	}
	if done, err := p.claimByRequest(ctx, claimID, data); done {
		return err
	}
	return p.claimByCommand(ctx, claimID, cmd, data)
}

// claimByRequest asks the arbiter for the claim by request. Asked so, the
// arbiter answers once it has applied the claim and stored the record: one
// read of the record tells how it went. done is false when the claim is
// left to the command subject (see claimByCommand): no arbiter answered,
// or the record is approved and not claimed, a claim the arbiter could not
// apply at once.
func (p *Permit) claimByRequest(ctx context.Context, claimID string, data []byte) (done bool, err error) {
	handled, err := p.g.askClaim(ctx, p.eventID, data)
	if err != nil {
		return true, err
	}
	if !handled {
		return false, nil
	}
	entry, err := p.g.kv.Get(ctx, p.eventID)
	if err != nil {
		return true, fmt.Errorf("orchestrator: read record %s: %w", p.eventID, err)
	}
	rec, err := p.g.waiter.decoded.decode(p.eventID, entry.Value(), entry.Revision())
	if err != nil {
		return true, fmt.Errorf("orchestrator: record %s is unreadable: %w", p.eventID, err)
	}
	if done, err := p.claimed(rec, claimID); done {
		if err != nil {
			return true, err
		}
		return true, p.keepReceipt(ctx, rec.Claim)
	}
	return false, nil
}

// claimByCommand publishes the claim cmd (data) on the command subject and
// waits for the record to tell how it went.
func (p *Permit) claimByCommand(ctx context.Context, claimID string, cmd contracts.Command, data []byte) error {
	result := make(chan error, 1)
	// The record is approved (terminal) already: the arbiter tells of the
	// claim it records, or refuses, on the changed announcement alone.
	var accepted *contracts.Claim // set before result is sent
	cancel, err := p.g.waiter.watch(ctx, p.eventID, onChanged, func(rec *contracts.Record, _ uint64) bool {
		done, err := p.claimed(rec, claimID)
		if done {
			if err == nil {
				accepted = rec.Claim
			}
			result <- err
		}
		return done
	})
	if err != nil {
		return err
	}
	defer cancel()
	select {
	case err := <-result:
		// The record already carried a claim before ours was sent.
		if err != nil {
			return err
		}
		return p.keepReceipt(ctx, accepted)
	default:
	}
	if err := p.g.publishClaim(ctx, cmd, data); err != nil {
		return err
	}
	select {
	case err := <-result:
		if err != nil {
			return err
		}
		return p.keepReceipt(ctx, accepted)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keepReceipt reads the receipt of this permit's accepted claim (see
// ReadReceipt) and keeps it for Receipt. The claim stands whether or not
// it is found: a tool that requires receipts refuses a call without one.
func (p *Permit) keepReceipt(ctx context.Context, claim *contracts.Claim) error {
	r, err := p.g.receipts.Read(ctx, p.eventID, claim)
	if err != nil {
		p.g.cfg.Logger.Warn("the receipt of an accepted claim could not be read", "event_id", p.eventID, "err", err)
	}
	p.receipt.Store(&r.Receipt)
	return nil
}

// claimWithin is how a request carries a rule's claim_within: empty for
// the default, so requests under rules that do not set it read as before.
func claimWithin(d time.Duration) string {
	if d <= 0 || d == contracts.DefaultClaimWithin {
		return ""
	}
	return d.String()
}

package approval_test

// Property tests of standing grants (issue 18): for any interleaving of
// votes (with and without grant requests), revocations, expiries, clock
// jumps and policy changes, no call is ever covered by a grant that was not
// issued by a decision meeting the rule's quorum and self-approval rules,
// that has expired, that was revoked, or that is wider than the rule
// allowed when it was issued (or than the rule in force allows now).
//
// A scenario is decoded from bytes, so FuzzGrantInterleavings can explore
// it; TestGrantInterleavings runs the same checker over fixed pseudo-random
// scenarios. The checker holds an independent model built from the
// scenario's own steps, not from the functions under test.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

var grantT0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// Choices a scenario draws from.
var (
	grantApprovers = []string{"u0", "u1", "u2", "u0", "u1", "u2", "req", "x"} // req is the requester; x no approver
	grantScopes    = []string{"", contracts.GrantScopeCall, contracts.GrantScopeRun, contracts.GrantScopeAgent, "forever"}
	grantTTLs      = []string{"30m", "1h", "8h", "24h", "-1h", "soon"}
	grantConds     = []string{"", "amount < 100", "true"}
	grantArgs      = []json.RawMessage{
		json.RawMessage(`{"amount":50}`), json.RawMessage(`{"amount":500}`), json.RawMessage(`{"amount":50,"to":"x"}`),
	}
	grantLimitsChoices = []*contracts.GrantLimits{
		nil,
		{Scopes: []string{contracts.GrantScopeCall}, MaxTTL: "8h", Arguments: contracts.GrantArgumentsSame},
		{Scopes: []string{contracts.GrantScopeCall, contracts.GrantScopeRun}, MaxTTL: "1h", Arguments: contracts.GrantArgumentsSame},
		{Scopes: []string{contracts.GrantScopeCall, contracts.GrantScopeRun, contracts.GrantScopeAgent}, MaxTTL: "8h", Arguments: contracts.GrantArgumentsCondition},
		{Scopes: []string{contracts.GrantScopeAgent}, MaxTTL: "8h", Arguments: ""},
	}
	grantPresets = []contracts.GrantRequest{
		{Scope: contracts.GrantScopeRun, TTL: "30m", Arguments: contracts.GrantArgumentsSame},
		{Scope: contracts.GrantScopeAgent, TTL: "1h", Arguments: contracts.GrantArgumentsSame},
		{Scope: contracts.GrantScopeAgent, TTL: "8h", Arguments: contracts.GrantArgumentsCondition, Condition: "amount < 100"},
	}
	grantSteps = []time.Duration{time.Minute, 20 * time.Minute, time.Hour, 3 * time.Hour, 9 * time.Hour}
)

// fakeMatch evaluates the few conditions scenarios use over a call's
// arguments: "true", and "amount < 100".
func fakeMatch(args json.RawMessage) func(string) (bool, error) {
	return func(cond string) (bool, error) {
		switch cond {
		case "true":
			return true, nil
		case "amount < 100":
			var m struct{ Amount float64 }
			if err := json.Unmarshal(args, &m); err != nil {
				return false, err
			}
			return m.Amount < 100, nil
		}
		return false, fmt.Errorf("unknown condition %q", cond)
	}
}

type grantReader struct {
	data []byte
	pos  int
}

func (r *grantReader) next() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

func pick[T any](r *grantReader, s []T) T { return s[int(r.next())%len(s)] }

// grantWorld is the model: what the scenario did, step by step.
type grantWorld struct {
	t   testing.TB
	now time.Time
	req contracts.ApprovalRequested
	rec contracts.Record
	// issued is the grant and the record that issued it; revokedAt when revoked.
	grant     *contracts.Grant
	issuedBy  contracts.Record
	revokedAt time.Time
	// policy in force: the rule that decides the request's tool, and its limits.
	rule   string
	limits *contracts.GrantLimits
	log    []string
	covers int
}

func (w *grantWorld) logf(format string, args ...any) {
	w.log = append(w.log, w.now.Sub(grantT0).String()+" "+fmt.Sprintf(format, args...))
}

func (w *grantWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	for _, l := range w.log {
		w.t.Log(l)
	}
	w.t.Fatalf(format, args...)
}

func runGrantScenario(t testing.TB, data []byte) *grantWorld {
	r := &grantReader{data: data}
	limits := pick(r, append(grantLimitsChoices, grantLimitsChoices[3], grantLimitsChoices[3], grantLimitsChoices[2]))
	quorum := 1 + int(r.next())%2
	onTimeout := contracts.OnTimeoutReject
	if r.next()%4 == 0 {
		onTimeout = contracts.OnTimeoutApprove
	}
	sha, err := contracts.ArgumentsSHA256(grantArgs[0])
	if err != nil {
		t.Fatal(err)
	}
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: "0b6f1c2e-7d4a-5b3c-9e8f-1a2b3c4d5e6f", Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "run-1", Agent: "bot", Tenant: "acme", RequestedBy: "req"},
		ToolCall: &contracts.ToolCall{ID: "c1", Name: "pay", Arguments: grantArgs[0], ArgumentsSHA256: sha},
		Policy:   contracts.PolicyRef{Rule: "payments", Version: "v1"},
		Quorum: contracts.Quorum{Required: quorum, Approvers: []string{"u0", "u1", "u2", "req"}, Veto: r.next()%2 == 0,
			AllowSelfApproval: r.next()%3 == 0, Order: contracts.OrderAny},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit},
		ExpiresAt:        grantT0.Add(2 * time.Hour), OnTimeout: onTimeout, CreatedAt: grantT0,
		Grants: limits,
	}
	w := &grantWorld{t: t, now: grantT0, req: req, rec: approval.NewRecord(req, grantT0), rule: "payments", limits: limits}
	for op := 0; op < 40 && r.pos < len(r.data); op++ {
		switch r.next() % 10 {
		case 0, 1, 2: // a vote
			w.vote(r, op)
		case 3: // time passes; the request may expire
			w.now = w.now.Add(pick(r, grantSteps))
			if res := approval.Expire(w.rec, w.now); res.Changed {
				w.logf("expired: %s", res.Record.Status)
				w.decided(res.Record)
			}
		case 4: // a revocation
			if w.grant != nil {
				next, changed := approval.RevokeGrant(*w.grant, contracts.Command{CommandID: fmt.Sprint("r", op), By: "u0"}, w.now)
				if changed != (w.revokedAt.IsZero()) {
					w.fatalf("revoking: changed=%v, but revoked before at %v", changed, w.revokedAt)
				}
				if changed {
					w.revokedAt = w.now
					w.logf("revoked")
				}
				w.grant = &next
			}
		case 5: // the policy changes (now and then)
			if r.next()%3 != 0 {
				break
			}
			w.limits = pick(r, grantLimitsChoices)
			w.rule = pick(r, []string{"payments", "payments", "other"})
			w.logf("policy: rule %s limits %+v", w.rule, w.limits)
		default: // a call
			w.call(r)
		}
	}
	return w
}

func (w *grantWorld) vote(r *grantReader, op int) {
	who := pick(r, grantApprovers)
	decision := pick(r, []string{contracts.DecisionApprove, contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit})
	v := contracts.Vote{Spec: contracts.SpecVote, VoteID: fmt.Sprint("v", op), EventID: w.req.EventID, Decision: decision,
		Approver: contracts.Approver{ID: who, Via: contracts.ViaAPI}, DecidedAt: w.now}
	if decision == contracts.DecisionEdit {
		v.Arguments = grantArgs[2]
	}
	switch r.next() % 4 {
	case 0: // no grant
	case 1: // any combination, mostly refused
		g := &contracts.GrantRequest{Scope: pick(r, grantScopes), TTL: pick(r, grantTTLs), Arguments: contracts.GrantArgumentsSame}
		if c := pick(r, grantConds); c != "" {
			g.Arguments, g.Condition = contracts.GrantArgumentsCondition, c
		}
		if r.next()%5 == 0 {
			g.Arguments = "any"
		}
		v.Grant = g
	default: // one of a few grants approvers agree on
		g := pick(r, grantPresets)
		v.Grant = &g
	}
	res := approval.ApplyVote(w.rec, v, w.now)
	w.logf("vote %s %s by %s grant %+v: refusal %q status %s", v.VoteID, decision, who, v.Grant, res.Refusal, res.Record.Status)
	if res.Refusal == "" && v.Grant != nil && approval.CheckGrantRequest(&w.req, v.Grant) != "" {
		w.fatalf("a vote asking for a grant the rule does not permit was counted: %+v", v.Grant)
	}
	if res.Changed {
		w.rec = res.Record
	}
	if res.Decided {
		w.decided(res.Record)
	}
}

// decided asks the record that just turned terminal for its grant.
func (w *grantWorld) decided(rec contracts.Record) {
	w.rec = rec
	g, ok := approval.IssueGrant(rec)
	if !ok {
		return
	}
	if w.grant != nil {
		w.fatalf("a second grant was issued")
	}
	w.grant, w.issuedBy = &g, rec
	w.logf("grant issued: %+v", g)
	w.checkIssued(g, rec)
}

// checkIssued holds an issued grant to the model: a quorum of distinct,
// listed, non-self approvers (unless allowed) approved the final arguments,
// each asking for this very grant, within the request's limits.
func (w *grantWorld) checkIssued(g contracts.Grant, rec contracts.Record) {
	req := w.req
	if rec.Status != contracts.StatusApproved || rec.Outcome == nil {
		w.fatalf("grant issued by a record that is %s", rec.Status)
	}
	var asked *contracts.GrantRequest
	approvers := map[string]bool{}
	for _, id := range rec.Outcome.DecidedBy {
		if id == contracts.DecidedByTimeout || !slices.Contains(req.Quorum.Approvers, id) {
			w.fatalf("grant issued with decider %q who is no approver", id)
		}
		if id == req.Run.RequestedBy && !req.Quorum.AllowSelfApproval {
			w.fatalf("grant issued with the requester's own approval")
		}
		found := false
		for _, v := range rec.Votes {
			if v.Approver.ID == id && (v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit) && v.Grant != nil {
				if asked != nil && *asked != *v.Grant {
					w.fatalf("deciders asked for different grants, yet one was issued")
				}
				asked, found = v.Grant, true
			}
		}
		if !found {
			w.fatalf("decider %s asked for no grant, yet one was issued", id)
		}
		approvers[id] = true
	}
	if len(approvers) < max(1, req.Quorum.Required) {
		w.fatalf("grant issued by %d approvers, quorum %d", len(approvers), req.Quorum.Required)
	}
	l := req.Grants
	if l == nil || !slices.Contains(l.Scopes, g.Scope) || g.Scope == contracts.GrantScopeCall {
		w.fatalf("grant scope %s not permitted by %+v", g.Scope, l)
	}
	maxTTL, _ := time.ParseDuration(l.MaxTTL)
	ttl, _ := time.ParseDuration(asked.TTL)
	if ttl <= 0 || ttl > maxTTL || !g.ExpiresAt.Equal(rec.Outcome.DecidedAt.Add(ttl)) {
		w.fatalf("grant lifetime %s (until %s) beyond the rule's %s", asked.TTL, g.ExpiresAt, l.MaxTTL)
	}
	if g.Arguments == contracts.GrantArgumentsCondition && l.Arguments != contracts.GrantArgumentsCondition {
		w.fatalf("condition grant where the rule permits the same arguments only")
	}
}

// call asks the grant about a call and checks every yes against the model.
func (w *grantWorld) call(r *grantReader) {
	if w.grant == nil {
		return
	}
	args := pick(r, grantArgs)
	sha, _ := contracts.ArgumentsSHA256(args)
	call := approval.GrantCall{
		Tenant: pick(r, []string{"acme", "acme", "acme", "acme", "globex", ""}), Agent: pick(r, []string{"bot", "bot", "bot", "bot", "other"}),
		RunID: pick(r, []string{"run-1", "run-1", "run-1", "run-2", ""}), Tool: pick(r, []string{"pay", "pay", "pay", "pay", "refund"}),
		Arguments: args, ArgumentsSHA256: sha, Rule: w.rule, Limits: w.limits,
	}
	ok, why := approval.GrantCovers(w.grant, call, w.now, fakeMatch(args))
	w.logf("call %+v: covered %v (%s)", call, ok, why)
	if !ok {
		return
	}
	w.covers++
	g, req, out := w.grant, w.req, w.issuedBy.Outcome
	switch {
	case !w.revokedAt.IsZero():
		w.fatalf("a revoked grant covered a call")
	case !w.now.Before(g.ExpiresAt):
		w.fatalf("an expired grant covered a call")
	case call.Tenant != req.Run.Tenant || call.Agent != req.Run.Agent || call.Tool != req.ToolCall.Name:
		w.fatalf("a grant covered another tenant, agent or tool")
	case g.Scope == contracts.GrantScopeRun && call.RunID != req.Run.ID:
		w.fatalf("a run grant covered another run")
	case call.Rule != req.Policy.Rule:
		w.fatalf("a grant covered a call another rule decides now")
	case w.limits == nil || !slices.Contains(w.limits.Scopes, g.Scope):
		w.fatalf("a grant covered a call though the policy in force no longer permits its scope")
	}
	if maxNow, _ := time.ParseDuration(w.limits.MaxTTL); g.ExpiresAt.Sub(g.GrantedAt) > maxNow {
		w.fatalf("a grant covered a call though it lives longer than the policy in force permits")
	}
	switch g.Arguments {
	case contracts.GrantArgumentsSame:
		if sha != out.ArgumentsSHA256 {
			w.fatalf("a same-arguments grant covered other arguments")
		}
	case contracts.GrantArgumentsCondition:
		if w.limits.Arguments != contracts.GrantArgumentsCondition {
			w.fatalf("a condition grant covered a call though the policy in force permits same arguments only")
		}
		if m, err := fakeMatch(args)(g.Condition); err != nil || !m {
			w.fatalf("a condition grant covered arguments its condition refuses")
		}
	default:
		w.fatalf("grant with argument mode %q covered a call", g.Arguments)
	}
}

func FuzzGrantInterleavings(f *testing.F) {
	for _, s := range grantSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runGrantScenario(t, data) })
}

// grantSeeds are scenarios that issue, use, revoke and outlive grants.
func grantSeeds() [][]byte {
	return [][]byte{
		// agent+condition limits, quorum 1; u0 approves asking agent/8h/condition true; calls; revoke; call.
		{3, 0, 1, 1, 1, 0, 0, 0, 3, 2, 2, 5, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 0},
		// run limits 1h, quorum 2, two approvals asking run/30m same; time passes past expiry; call.
		{2, 1, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 2, 3, 5, 0, 0, 0, 0, 0},
	}
}

func TestGrantInterleavings(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2))
	issued, covered := 0, 0
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		data := make([]byte, 8+rng.IntN(120))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		w := runGrantScenario(t, data)
		if w.grant != nil {
			issued++
		}
		covered += w.covers
		if t.Failed() {
			t.Fatalf("scenario %d: %x", i, data)
		}
	}
	// The checker must have seen grants issued and used, or it proved nothing.
	if issued < n/50 || covered < n/50 {
		t.Fatalf("scenarios issued %d grants and covered %d calls out of %d: too few to say anything", issued, covered, n)
	}
	t.Logf("%d scenarios: %d grants issued, %d calls covered", n, issued, covered)
}

package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// stored is when the bus stored the requests of these tests.
var stored = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

var verifyOpts = policy.VerifyOptions{Stored: stored, Retention: 30 * 24 * time.Hour, ClockSkew: time.Minute}

const verifyPolicy = `
version: v7
groups:
  finance: [fay, fred]
rules:
  - name: reads
    tools: [db.read]
    action: allow
  - name: drops
    tools: [db.drop]
    action: deny
  - name: payments
    tools: [payments.send]
    when: args.amount > 1000
    action: require_approval
    risk: high
    approvers: ["group:finance", cfo]
    quorum: 2
    allow_self_approval: false
    order: sequence
    timeout: 2h
    on_timeout: reject
    allowed_decisions: [approve, reject]
    escalation:
      - after: 1h
        approvers: [ceo]
  - name: small-payments
    tools: [payments.send]
    action: require_approval
    approvers: ["group:ops"]
    veto: false
    timeout: 10m
    on_timeout: approve
    allowed_decisions: [approve, reject, edit]
  - name: questions
    tools: [request_human_input]
    action: require_approval
    approvers: [ann]
    timeout: 1h
`

// snapshot is the request a correct orchestrator publishes for the call
// under p, created when the bus stored it: the decision's settings, groups
// the policy does not define resolved to members.
func snapshot(t *testing.T, p *policy.Policy, req contracts.ApprovalRequested, members map[string][]string) contracts.ApprovalRequested {
	t.Helper()
	d := p.Evaluate(policy.RequestInput(&req))
	resolve := func(list []string) []string {
		out := []string{}
		for _, a := range list {
			if name, ok := strings.CutPrefix(a, "group:"); ok {
				out = append(out, members[name]...)
				continue
			}
			out = append(out, a)
		}
		return out
	}
	req.Policy = contracts.PolicyRef{Rule: d.Rule, Version: d.Version, Error: d.Error}
	req.Risk = d.Risk
	req.Quorum = contracts.Quorum{Required: d.Quorum, Approvers: resolve(d.Approvers), Veto: d.Veto,
		AllowSelfApproval: d.AllowSelfApproval, Order: d.Order}
	req.Escalation = []contracts.EscalationTier{}
	for _, tier := range d.Escalation {
		req.Escalation = append(req.Escalation, contracts.EscalationTier{After: tier.After.String(), Approvers: resolve(tier.Approvers)})
	}
	req.AllowedDecisions = slices.Clone(d.AllowedDecisions)
	req.OnTimeout = d.OnTimeout
	req.CreatedAt = stored.Add(-200 * time.Millisecond) // published just before it was stored
	req.ExpiresAt = req.CreatedAt.Add(d.Timeout)
	if req.Kind == contracts.KindHumanInput {
		req.AllowedDecisions = []string{contracts.DecisionAnswer}
		req.OnTimeout = contracts.OnTimeoutReject
	}
	return req
}

func toolRequest(tool, args string) contracts.ApprovalRequested {
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: "e1", Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "r1", Agent: "billing", RequestedBy: "erin"},
		ToolCall: &contracts.ToolCall{ID: "c1", Name: tool, Arguments: json.RawMessage(args)},
	}
}

func question(text string) contracts.ApprovalRequested {
	return contracts.ApprovalRequested{
		Spec: contracts.SpecHumanInputRequested, EventID: "e2", Kind: contracts.KindHumanInput,
		Run:      contracts.Run{ID: "r1", Agent: "billing"},
		Question: &contracts.Question{Text: text},
	}
}

func TestVerifyRequest(t *testing.T) {
	p := mustParse(t, verifyPolicy)
	members := map[string][]string{"ops": {"olga", "oscar"}}
	big := snapshot(t, p, toolRequest("payments.send", `{"amount":99999}`), members)
	small := snapshot(t, p, toolRequest("payments.send", `{"amount":10}`), members)
	ask := snapshot(t, p, question("Which account?"), members)
	edit := func(base contracts.ApprovalRequested, f func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
		base.Quorum.Approvers = slices.Clone(base.Quorum.Approvers)
		base.Escalation = slices.Clone(base.Escalation)
		base.AllowedDecisions = slices.Clone(base.AllowedDecisions)
		f(&base)
		return base
	}
	tests := []struct {
		name   string
		req    contracts.ApprovalRequested
		reason string // "" accepts
		want   string // a problem that must be named
	}{
		{name: "the snapshot the gate publishes", req: big},
		{name: "a rule whose approvers are a directory group", req: small},
		{name: "a question", req: ask},
		{name: "a stricter snapshot", req: edit(big, func(r *contracts.ApprovalRequested) {
			r.Quorum.Required = 3
			r.Quorum.Approvers = []string{"fay", "fred", "cfo"}
			r.ExpiresAt = r.CreatedAt.Add(time.Hour)
			r.AllowedDecisions = []string{contracts.DecisionReject}
		})},
		{name: "expires_at within the clock skew", req: edit(big, func(r *contracts.ApprovalRequested) { r.ExpiresAt = r.ExpiresAt.Add(30 * time.Second) })},
		{name: "on_timeout reject where the rule approves", req: edit(small, func(r *contracts.ApprovalRequested) { r.OnTimeout = contracts.OnTimeoutReject })},

		{name: "the exact attack", reason: contracts.RefusalRuleMismatch, want: `rule "payments", not "none"`,
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.Policy.Rule = "none"
				r.Quorum = contracts.Quorum{Approvers: []string{}}
				r.OnTimeout = contracts.OnTimeoutApprove
				r.ExpiresAt = stored.Add(2 * time.Second)
			})},
		{name: "the attack naming the right rule", reason: contracts.RefusalWeakerThanPolicy, want: "on_timeout approve where the rule says reject",
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.Quorum = contracts.Quorum{Approvers: []string{}}
				r.OnTimeout = contracts.OnTimeoutApprove
				r.ExpiresAt = stored.Add(2 * time.Second)
			})},
		{name: "another version", reason: contracts.RefusalRuleMismatch, want: "checked against",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Policy.Version = "v6" })},
		{name: "a call the policy allows", reason: contracts.RefusalNotGated, want: "allows this call",
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.ToolCall = &contracts.ToolCall{Name: "db.read", Arguments: json.RawMessage(`{}`)}
			})},
		{name: "a call the policy denies", reason: contracts.RefusalNotGated, want: "denies this call",
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.ToolCall = &contracts.ToolCall{Name: "db.drop", Arguments: json.RawMessage(`{}`)}
			})},
		{name: "arguments another rule decides", reason: contracts.RefusalRuleMismatch, want: `rule "small-payments"`,
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.ToolCall = &contracts.ToolCall{Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)}
			})},
		{name: "a lower quorum", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.required 1 is below the rule's 2",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.Required = 1 })},
		{name: "a zero quorum", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.required 1 is below the rule's 2",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.Required = 0 })},
		{name: "no veto", reason: contracts.RefusalWeakerThanPolicy, want: "veto is off",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.Veto = false })},
		{name: "self-approval", reason: contracts.RefusalWeakerThanPolicy, want: "allow_self_approval",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.AllowSelfApproval = true })},
		{name: "any order", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.order",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.Order = contracts.OrderAny })},
		{name: "anyone may approve", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.approvers is empty",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Quorum.Approvers = []string{} })},
		{name: "anyone may approve where a group decides", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.approvers is empty",
			req: edit(small, func(r *contracts.ApprovalRequested) { r.Quorum.Approvers = nil })},
		{name: "a group name as an approver", reason: contracts.RefusalWeakerThanPolicy, want: `approver "group:other"`,
			req: edit(small, func(r *contracts.ApprovalRequested) { r.Quorum.Approvers = []string{"group:other"} })},
		{name: "an edit the rule does not allow", reason: contracts.RefusalWeakerThanPolicy, want: `"edit"`,
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.AllowedDecisions = append(r.AllowedDecisions, contracts.DecisionEdit)
			})},
		{name: "every decision (empty list)", reason: contracts.RefusalWeakerThanPolicy, want: `"respond"`,
			req: edit(big, func(r *contracts.ApprovalRequested) { r.AllowedDecisions = nil })},
		{name: "a later deadline", reason: contracts.RefusalWeakerThanPolicy, want: "more than the rule's timeout 2h0m0s after created_at",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.ExpiresAt = r.CreatedAt.Add(3 * time.Hour) })},
		{name: "a later deadline from a created_at in the future", reason: contracts.RefusalWeakerThanPolicy, want: "after the request was stored",
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.CreatedAt = stored.Add(time.Hour)
				r.ExpiresAt = r.CreatedAt.Add(2 * time.Hour)
			})},
		{name: "approval by timeout sooner than the rule's", reason: contracts.RefusalWeakerThanPolicy, want: "approves on timeout sooner",
			req: edit(small, func(r *contracts.ApprovalRequested) { r.ExpiresAt = stored.Add(time.Second) })},
		{name: "approval by timeout from a created_at in the past", reason: contracts.RefusalWeakerThanPolicy, want: "approves on timeout sooner",
			req: edit(small, func(r *contracts.ApprovalRequested) {
				r.CreatedAt = stored.Add(-10 * time.Minute)
				r.ExpiresAt = stored
			})},
		{name: "escalation from a created_at in the past", reason: contracts.RefusalWeakerThanPolicy, want: "created_at",
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.CreatedAt = stored.Add(-90 * time.Minute)
				r.ExpiresAt = r.CreatedAt.Add(2 * time.Hour)
			})},
		{name: "no escalation", reason: contracts.RefusalWeakerThanPolicy, want: "escalation has 0 tiers where the rule has 1",
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Escalation = nil })},
		{name: "an earlier escalation", reason: contracts.RefusalWeakerThanPolicy, want: `escalation[0].after "1m0s"`,
			req: edit(big, func(r *contracts.ApprovalRequested) { r.Escalation[0].After = "1m0s" })},
		{name: "an escalation approver the rule does not name", reason: contracts.RefusalWeakerThanPolicy, want: `escalation[0] approver "mallory"`,
			req: edit(big, func(r *contracts.ApprovalRequested) {
				r.Escalation[0] = contracts.EscalationTier{After: r.Escalation[0].After, Approvers: []string{"ceo", "mallory"}}
			})},
		{name: "a question answered on timeout", reason: contracts.RefusalWeakerThanPolicy, want: "time never answers",
			req: edit(ask, func(r *contracts.ApprovalRequested) { r.OnTimeout = contracts.OnTimeoutApprove })},
		{name: "a question approved", reason: contracts.RefusalWeakerThanPolicy, want: `"approve" on a question`,
			req: edit(ask, func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{contracts.DecisionApprove} })},
		{name: "a question anyone may answer", reason: contracts.RefusalWeakerThanPolicy, want: "quorum.approvers is empty",
			req: edit(ask, func(r *contracts.ApprovalRequested) { r.Quorum.Approvers = nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Evaluate(policy.RequestInput(&tt.req))
			err := policy.VerifyRequest(&tt.req, d, verifyOpts)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *policy.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a *RequestError", err)
			}
			if re.Reason != tt.reason || !strings.Contains(re.Error(), tt.want) {
				t.Fatalf("refused with %q, want reason %s naming %q", re.Error(), tt.reason, tt.want)
			}
		})
	}
}

// TestVerifyRequestBuiltinDefault: the built-in policy (every call
// requires approval, by anyone) is checked like any other.
func TestVerifyRequestBuiltinDefault(t *testing.T) {
	p := policy.Default()
	req := snapshot(t, p, toolRequest("anything", `{}`), nil)
	if err := policy.VerifyRequest(&req, p.Evaluate(policy.RequestInput(&req)), verifyOpts); err != nil {
		t.Fatalf("refused: %v", err)
	}
	req.OnTimeout = contracts.OnTimeoutApprove
	if err := policy.VerifyRequest(&req, p.Evaluate(policy.RequestInput(&req)), verifyOpts); err == nil {
		t.Fatal("approval on timeout under the built-in policy was accepted")
	}
}

// TestVerifyRequestProperty: for random rules, the snapshot a correct
// orchestrator publishes is accepted and every weakening of it is refused.
func TestVerifyRequestProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	people := []string{"ann", "bob", "cat", "dan", "eve"}
	members := map[string][]string{"ops": {"olga", "oscar"}}
	decisions := []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond}
	tried := map[string]int{}
	for i := range 500 {
		src, desc := randomRule(rng, people, decisions)
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatalf("scenario %d: generated policy does not parse: %v\n%s", i, err, src)
		}
		correct := snapshot(t, p, toolRequest("tool.x", `{"n":1}`), members)
		d := p.Evaluate(policy.RequestInput(&correct))
		if err := policy.VerifyRequest(&correct, d, verifyOpts); err != nil {
			t.Fatalf("scenario %d (%s): the correct snapshot was refused: %v", i, desc, err)
		}
		applied := 0
		for _, w := range weakenings {
			weak := correct
			weak.Quorum.Approvers = slices.Clone(correct.Quorum.Approvers)
			weak.Escalation = slices.Clone(correct.Escalation)
			weak.AllowedDecisions = slices.Clone(correct.AllowedDecisions)
			if !w.apply(&weak, d, rng) {
				continue
			}
			applied++
			tried[w.name]++
			if err := policy.VerifyRequest(&weak, d, verifyOpts); err == nil {
				t.Fatalf("scenario %d (%s): weakening %q was accepted:\n%+v", i, desc, w.name, weak)
			}
		}
		if applied == 0 {
			t.Fatalf("scenario %d (%s): no weakening applies", i, desc)
		}
	}
	for _, w := range weakenings {
		if tried[w.name] == 0 {
			t.Errorf("weakening %q was never tried", w.name)
		}
	}
}

// weakenings each make a correct snapshot weaker than its rule, when the
// rule leaves room for it (apply reports whether it did).
var weakenings = []struct {
	name  string
	apply func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool
}{
	{"lower quorum", func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool {
		if d.Quorum <= 1 {
			return false
		}
		r.Quorum.Required = rng.IntN(d.Quorum)
		return true
	}},
	{"veto off", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.Veto = false
		return d.Veto
	}},
	{"self-approval", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.AllowSelfApproval = true
		return !d.AllowSelfApproval
	}},
	{"any order", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.Order = contracts.OrderAny
		return d.Order == contracts.OrderSequence
	}},
	{"anyone approves", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.Approvers = nil
		return len(d.Approvers) > 0
	}},
	{"a stranger approves", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.Approvers = append(r.Quorum.Approvers, "group:strangers")
		return len(d.Approvers) > 0
	}},
	{"an outsider approves", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Quorum.Approvers = append(r.Quorum.Approvers, "mallory")
		return len(d.Approvers) > 0 && !slices.ContainsFunc(d.Approvers, func(a string) bool { return strings.HasPrefix(a, "group:") })
	}},
	{"a decision the rule does not allow", func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool {
		var missing []string
		for _, dec := range []string{contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit, contracts.DecisionRespond} {
			if !slices.Contains(d.AllowedDecisions, dec) {
				missing = append(missing, dec)
			}
		}
		if len(missing) == 0 {
			return false
		}
		if rng.IntN(2) == 0 {
			r.AllowedDecisions = nil // every decision
		} else {
			r.AllowedDecisions = append(r.AllowedDecisions, missing[rng.IntN(len(missing))])
		}
		return true
	}},
	{"approve on timeout", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.OnTimeout = contracts.OnTimeoutApprove
		return d.OnTimeout != contracts.OnTimeoutApprove
	}},
	{"approve on timeout sooner", func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool {
		if d.OnTimeout != contracts.OnTimeoutApprove {
			return false
		}
		r.ExpiresAt = stored.Add(time.Duration(rng.Int64N(int64(d.Timeout - 2*time.Minute))))
		return true
	}},
	{"created earlier to time out sooner", func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool {
		if d.OnTimeout != contracts.OnTimeoutApprove && len(d.Escalation) == 0 {
			return false
		}
		back := 2*time.Minute + time.Duration(rng.Int64N(int64(d.Timeout)))
		r.CreatedAt = r.CreatedAt.Add(-back)
		r.ExpiresAt = r.ExpiresAt.Add(-back)
		return true
	}},
	{"a later deadline", func(r *contracts.ApprovalRequested, d policy.Decision, rng *rand.Rand) bool {
		r.ExpiresAt = r.ExpiresAt.Add(2*time.Minute + time.Duration(rng.Int64N(int64(48*time.Hour))))
		return true
	}},
	{"no escalation", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Escalation = nil
		return len(d.Escalation) > 0
	}},
	{"an earlier tier", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		if len(r.Escalation) == 0 {
			return false
		}
		after, _ := time.ParseDuration(r.Escalation[0].After)
		r.Escalation[0].After = (after / 2).String()
		return true
	}},
	{"a stranger in a tier", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		if len(r.Escalation) == 0 || len(d.Approvers) == 0 {
			return false
		}
		tier := r.Escalation[0]
		tier.Approvers = append(slices.Clone(tier.Approvers), "group:strangers")
		r.Escalation[0] = tier
		return true
	}},
	{"another rule", func(r *contracts.ApprovalRequested, d policy.Decision, _ *rand.Rand) bool {
		r.Policy.Rule = "other"
		return true
	}},
}

// randomRule writes a policy with one require_approval rule for tool.x with
// random settings, and says what it picked.
func randomRule(rng *rand.Rand, people, decisions []string) (string, string) {
	var b strings.Builder
	b.WriteString("version: prop\nrules:\n  - name: r\n    tools: [tool.x]\n    action: require_approval\n")
	var desc []string
	set := func(line string) {
		b.WriteString("    " + line + "\n")
		desc = append(desc, line)
	}
	var approvers []string
	if rng.IntN(4) > 0 {
		for _, p := range people {
			if rng.IntN(2) == 0 {
				approvers = append(approvers, p)
			}
		}
		if rng.IntN(3) == 0 {
			approvers = append(approvers, "group:ops")
		}
		if len(approvers) > 0 {
			set(`approvers: ["` + strings.Join(approvers, `", "`) + `"]`)
		}
	}
	named := len(slices.DeleteFunc(slices.Clone(approvers), func(a string) bool { return strings.HasPrefix(a, "group:") }))
	if n := named; n > 1 && rng.IntN(2) == 0 {
		set(fmt.Sprintf("quorum: %d", 1+rng.IntN(n)))
	}
	if rng.IntN(2) == 0 {
		set(fmt.Sprintf("veto: %t", rng.IntN(2) == 0))
	}
	if rng.IntN(2) == 0 {
		set(fmt.Sprintf("allow_self_approval: %t", rng.IntN(2) == 0))
	}
	if rng.IntN(3) == 0 {
		set("order: sequence")
	}
	timeout := time.Duration(10+rng.IntN(600)) * time.Minute
	set("timeout: " + timeout.String())
	if rng.IntN(2) == 0 {
		set("on_timeout: approve")
	}
	if rng.IntN(2) == 0 {
		var allowed []string
		for _, d := range decisions {
			if rng.IntN(2) == 0 {
				allowed = append(allowed, d)
			}
		}
		if len(allowed) > 0 {
			set(fmt.Sprintf("allowed_decisions: [%s]", strings.Join(allowed, ", ")))
		}
	}
	if rng.IntN(2) == 0 {
		after := time.Duration(1+rng.IntN(int(timeout/time.Minute)-1)) * time.Minute
		set(fmt.Sprintf("escalation: [{after: %s, approvers: [%s]}]", after, people[rng.IntN(len(people))]))
	}
	return b.String(), strings.Join(desc, "; ")
}

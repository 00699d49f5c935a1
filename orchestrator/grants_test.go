package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const grantPolicy = `
version: "grants-1"
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob, carol]
    grants: {scopes: [call, run, agent], max_ttl: 8h, arguments: condition}
  - name: deploys
    tools: ["deploy"]
    action: require_approval
    approvers: [alice, bob]
    quorum: 2
    grants: {scopes: [run], max_ttl: 1h}
`

type grantEnv struct {
	srv    *eventstest.Server
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	grants jetstream.KeyValue
	a, b   *orchestrator.Gate
}

// setupGrants starts an arbiter and two gates, each on its own connection
// with its own grant book, as two agent processes would run.
func setupGrants(t *testing.T) *grantEnv {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	pol := orchestrator.StaticPolicy{P: countersigntest.Policy(t, grantPolicy)}
	e := &grantEnv{srv: srv, js: js,
		a: countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleOrchestrator), pol),
		b: countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleOrchestrator), pol)}
	var err error
	if e.kv, err = js.KeyValue(context.Background(), contracts.BucketApprovals); err != nil {
		t.Fatal(err)
	}
	if e.grants, err = js.KeyValue(context.Background(), contracts.BucketGrants); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *grantEnv) vote(t *testing.T, eventID, approver string, g *contracts.GrantRequest) {
	t.Helper()
	id := uuid.NewString()
	v := contracts.Vote{Spec: contracts.SpecVote, VoteID: id, EventID: eventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: approver, Via: contracts.ViaNATS}, Grant: g, DecidedAt: time.Now().UTC()}
	if _, err := events.Publish(context.Background(), e.js, contracts.ResolvedSubject(eventID), v, id, nil); err != nil {
		t.Fatal(err)
	}
}

// waitKey blocks until the key of kv satisfies cond (a KV watch, no polling).
func waitKey(t *testing.T, kv jetstream.KeyValue, key string, cond func([]byte) bool) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := kv.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case e := <-w.Updates():
			if e != nil && cond(e.Value()) {
				return e.Value()
			}
		case <-ctx.Done():
			t.Fatalf("%s: the condition never held", key)
		}
	}
}

func (e *grantEnv) waitStatus(t *testing.T, eventID, status string) contracts.Record {
	t.Helper()
	var rec contracts.Record
	waitKey(t, e.kv, eventID, func(b []byte) bool { return json.Unmarshal(b, &rec) == nil && rec.Status == status })
	return rec
}

func (e *grantEnv) waitGrant(t *testing.T, id string, cond func(*contracts.Grant) bool) contracts.Grant {
	t.Helper()
	var g contracts.Grant
	waitKey(t, e.grants, id, func(b []byte) bool { return json.Unmarshal(b, &g) == nil && cond(&g) })
	// Both gates' books have it too: a call right after is judged with it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, gate := range []*orchestrator.Gate{e.a, e.b} {
		if err := gate.Grants().Await(ctx, id); err != nil {
			t.Fatalf("a gate's book never had grant %s: %v", id, err)
		}
	}
	return g
}

func submit(t *testing.T, g *orchestrator.Gate, run contracts.Run, callID, tool, args string) orchestrator.Verdict {
	t.Helper()
	vs, err := g.Submit(context.Background(), run, []orchestrator.ToolCall{{ID: callID, Name: tool, Arguments: json.RawMessage(args)}})
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}

// grantUses reads the uses recorded in a grant's timeline.
func grantUses(t *testing.T, js jetstream.JetStream, grantID string) []contracts.GrantEvent {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.GrantUsedSubject(grantID)}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []contracts.GrantEvent
	if info.NumPending == 0 {
		return out
	}
	batch, err := c.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		var ev contracts.GrantEvent
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func TestGrantCoversTheRunOnEveryGateUntilRevoked(t *testing.T) {
	e := setupGrants(t)
	run := contracts.Run{ID: "run-1", Agent: "billing", Tenant: "acme", RequestedBy: "erin"}
	args := `{"amount": 120, "to": "Globex"}`

	first := submit(t, e.a, run, "call-1", "payments.send", args)
	if first.Verdict != orchestrator.VerdictPending {
		t.Fatalf("first call: %s, want pending", first.Verdict)
	}
	e.vote(t, first.EventID, "alice", &contracts.GrantRequest{Scope: contracts.GrantScopeRun, TTL: "1h", Arguments: contracts.GrantArgumentsSame})
	e.waitStatus(t, first.EventID, contracts.StatusApproved)
	g := e.waitGrant(t, first.EventID, func(*contracts.Grant) bool { return true })
	if g.Scope != contracts.GrantScopeRun || g.RunID != "run-1" || g.Tenant != "acme" || len(g.GrantedBy) != 1 || g.GrantedBy[0] != "alice" {
		t.Fatalf("grant = %+v", g)
	}

	// The same tool and arguments later in the run, on the other process's
	// gate: allowed without a request, naming the grant.
	second := submit(t, e.b, run, "call-2", "payments.send", `{"to": "Globex", "amount": 120}`)
	if second.Verdict != orchestrator.VerdictAllowed || second.GrantID != first.EventID || second.EventID != "" {
		t.Fatalf("second call: %+v, want allowed under grant %s", second, first.EventID)
	}
	if _, err := e.kv.Get(context.Background(), orchestrator.EventID(run, "call-2")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a call a grant covers still asked for approval (record: %v)", err)
	}
	if err := second.Permit.Claim(context.Background()); err != nil {
		t.Fatalf("claim under an active grant: %v", err)
	}
	held := submit(t, e.a, run, "call-3", "payments.send", args).Permit // allowed now, claimed after the revocation

	// Never wider than granted: another run, tenant, agent, tool or arguments asks again.
	for name, c := range map[string]struct {
		run        contracts.Run
		tool, args string
	}{
		"another run":       {contracts.Run{ID: "run-2", Agent: "billing", Tenant: "acme"}, "payments.send", args},
		"another tenant":    {contracts.Run{ID: "run-1", Agent: "billing", Tenant: "globex"}, "payments.send", args},
		"another agent":     {contracts.Run{ID: "run-1", Agent: "sales", Tenant: "acme"}, "payments.send", args},
		"another tool":      {run, "payments.refund", args},
		"another arguments": {run, "payments.send", `{"amount": 121, "to": "Globex"}`},
	} {
		if v := submit(t, e.b, c.run, "wide-"+uuid.NewString(), c.tool, c.args); v.Verdict != orchestrator.VerdictPending || v.GrantID != "" {
			t.Errorf("%s: %s (grant %q), want a new request", name, v.Verdict, v.GrantID)
		}
	}

	// Revoked (as the API does: a command to the arbiter), the grant stops on
	// both gates at once: the first call after the revocation is stored asks again.
	start := time.Now()
	cmd := contracts.Command{Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: first.EventID,
		Command: contracts.CommandRevokeGrant, By: "bob"}
	if _, err := events.Publish(context.Background(), e.srv.JetStreamAs(embedded.RoleAPI), contracts.CommandSubject(first.EventID), cmd, cmd.CommandID, nil); err != nil {
		t.Fatal(err)
	}
	revoked := e.waitGrant(t, first.EventID, func(g *contracts.Grant) bool { return g.Revoked != nil })
	if revoked.Revoked.By != "bob" {
		t.Fatalf("revocation = %+v", revoked.Revoked)
	}
	for i, gate := range []*orchestrator.Gate{e.a, e.b} {
		if v := submit(t, gate, run, "after-"+uuid.NewString(), "payments.send", args); v.Verdict != orchestrator.VerdictPending || v.GrantID != "" {
			t.Fatalf("gate %d after the revocation: %s (grant %q), want a new request", i, v.Verdict, v.GrantID)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the revocation took %s to stop the grant on both gates", took)
	}
	if err := held.Claim(context.Background()); !errors.Is(err, orchestrator.ErrNotApproved) {
		t.Fatalf("claim of a permit whose grant was revoked since: %v, want ErrNotApproved", err)
	}
	uses := grantUses(t, e.js, first.EventID)
	if len(uses) != 2 || uses[0].ToolCallID != "call-2" || uses[1].ToolCallID != "call-3" || uses[0].By[0] != "billing" {
		t.Fatalf("uses in the grant's timeline = %+v, want call-2 and call-3", uses)
	}
}

func TestGrantNeedsTheQuorumAndTheRule(t *testing.T) {
	e := setupGrants(t)
	run := contracts.Run{ID: "run-9", Agent: "ops", RequestedBy: "erin"}
	runGrant := &contracts.GrantRequest{Scope: contracts.GrantScopeRun, TTL: "30m", Arguments: contracts.GrantArgumentsSame}

	// Quorum 2: one approver asks for a grant, the other does not: the call
	// is approved, nothing more.
	v := submit(t, e.a, run, "d-1", "deploy", `{"env": "prod"}`)
	e.vote(t, v.EventID, "alice", runGrant)
	e.vote(t, v.EventID, "bob", nil)
	e.waitStatus(t, v.EventID, contracts.StatusApproved)
	if next := submit(t, e.a, run, "d-2", "deploy", `{"env": "prod"}`); next.Verdict != orchestrator.VerdictPending {
		t.Fatalf("a grant only one of a quorum of two asked for covered a call: %+v", next)
	}
	if _, err := e.grants.Get(context.Background(), v.EventID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("grant written: %v", err)
	}

	// Beyond the rule (agent scope, a longer ttl): the vote is refused, and says why.
	w := submit(t, e.a, run, "d-3", "deploy", `{"env": "dev"}`)
	e.vote(t, w.EventID, "alice", &contracts.GrantRequest{Scope: contracts.GrantScopeAgent, TTL: "30m", Arguments: contracts.GrantArgumentsSame})
	var rec contracts.Record
	waitKey(t, e.kv, w.EventID, func(b []byte) bool { return json.Unmarshal(b, &rec) == nil && len(rec.RefusedVotes) == 1 })
	if r := rec.RefusedVotes[0]; r.Reason != contracts.ReasonGrantNotAllowed || r.Detail == "" {
		t.Fatalf("refused vote = %+v, want grant_not_allowed with a detail", r)
	}

	// Both approvers ask for the same grant: issued, by both.
	e.vote(t, w.EventID, "alice", runGrant)
	e.vote(t, w.EventID, "bob", runGrant)
	g := e.waitGrant(t, w.EventID, func(*contracts.Grant) bool { return true })
	if len(g.GrantedBy) != 2 {
		t.Fatalf("granted by %v, want alice and bob", g.GrantedBy)
	}
	if next := submit(t, e.b, run, "d-4", "deploy", `{"env": "dev"}`); next.GrantID != w.EventID {
		t.Fatalf("the quorum's grant did not cover the next call: %+v", next)
	}
}

func TestConditionGrantCoversWhatItsConditionAdmits(t *testing.T) {
	e := setupGrants(t)
	run := contracts.Run{ID: "run-5", Agent: "billing", Tenant: "acme"}
	v := submit(t, e.a, run, "p-1", "payments.send", `{"amount": 40}`)

	// A condition that does not compile is refused at the arbiter.
	e.vote(t, v.EventID, "carol", &contracts.GrantRequest{Scope: contracts.GrantScopeAgent, TTL: "2h",
		Arguments: contracts.GrantArgumentsCondition, Condition: "args.amount <"})
	var rec contracts.Record
	waitKey(t, e.kv, v.EventID, func(b []byte) bool { return json.Unmarshal(b, &rec) == nil && len(rec.RefusedVotes) == 1 })
	if r := rec.RefusedVotes[0]; r.Reason != contracts.ReasonGrantNotAllowed {
		t.Fatalf("refused vote = %+v, want grant_not_allowed", r)
	}

	e.vote(t, v.EventID, "alice", &contracts.GrantRequest{Scope: contracts.GrantScopeAgent, TTL: "2h",
		Arguments: contracts.GrantArgumentsCondition, Condition: "args.amount <= 50"})
	e.waitGrant(t, v.EventID, func(*contracts.Grant) bool { return true })
	other := contracts.Run{ID: "run-6", Agent: "billing", Tenant: "acme"}
	if got := submit(t, e.b, other, "p-2", "payments.send", `{"amount": 50}`); got.GrantID != v.EventID {
		t.Fatalf("amount 50 in another run: %+v, want allowed under the agent grant", got)
	}
	if got := submit(t, e.b, other, "p-3", "payments.send", `{"amount": 51}`); got.Verdict != orchestrator.VerdictPending {
		t.Fatalf("amount 51: %+v, want a new request", got)
	}
	if got := submit(t, e.b, contracts.Run{ID: "run-6", Agent: "billing", Tenant: "globex"}, "p-4", "payments.send", `{"amount": 5}`); got.Verdict != orchestrator.VerdictPending {
		t.Fatalf("another tenant: %+v, want a new request", got)
	}
}

// Every call a grant allows is in the audit log, as the arbiter logs it
// from the use the gate recorded: grant_used, with the grant's tenant, the
// agent, and the run and tool call it allowed. A use an agent's credential
// forges — for a grant that does not exist, or for a call the grant could
// not allow (another tool or agent) — is logged as grant_use_refused with
// why.
func TestGrantUsesAreInTheAuditLog(t *testing.T) {
	e := setupGrants(t)
	run := contracts.Run{ID: "run-audit", Agent: "billing", Tenant: "acme", RequestedBy: "erin"}
	args := `{"amount": 120, "to": "Globex"}`
	first := submit(t, e.a, run, "call-1", "payments.send", args)
	e.vote(t, first.EventID, "alice", &contracts.GrantRequest{Scope: contracts.GrantScopeRun, TTL: "1h", Arguments: contracts.GrantArgumentsSame})
	e.waitGrant(t, first.EventID, func(*contracts.Grant) bool { return true })
	if v := submit(t, e.b, run, "call-2", "payments.send", args); v.Verdict != orchestrator.VerdictAllowed || v.GrantID != first.EventID {
		t.Fatalf("second call: %+v, want allowed under the grant", v)
	}

	agent := e.srv.JetStreamAs(embedded.RoleOrchestrator)
	forge := func(grantID, tool, by, call string) {
		ev := contracts.GrantEvent{Spec: contracts.SpecGrantEvent, GrantID: grantID, Event: contracts.GrantEventUsed, By: []string{by},
			RunID: run.ID, ToolCallID: call, Tool: tool, At: time.Now().UTC()}
		if _, err := events.Publish(context.Background(), agent, contracts.GrantUsedSubject(grantID), ev, uuid.NewString(), nil); err != nil {
			t.Fatal(err)
		}
	}
	forge(uuid.NewString(), "payments.send", "billing", "forged-1") // no such grant
	forge(first.EventID, "payments.refund", "billing", "forged-2")  // another tool
	forge(first.EventID, "payments.send", "sales", "forged-3")      // another agent

	want := map[string]string{ // tool call → change and reason
		"call-2":   "grant_used",
		"forged-1": "grant_use_refused unknown_grant",
		"forged-2": "grant_use_refused grant_use_mismatch",
		"forged-3": "grant_use_refused grant_use_mismatch",
	}
	got := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := e.js.OrderedConsumer(ctx, audit.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for len(got) < len(want) {
		m, err := c.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("audit log so far %v, want %v: %v", got, want, err)
		}
		raws, _, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range raws {
			var en audit.Entry
			if err := json.Unmarshal(raw, &en); err != nil {
				t.Fatal(err)
			}
			if en.Change != audit.ChangeGrantUsed && en.Change != audit.ChangeGrantUseRefused {
				continue
			}
			if _, dup := got[en.ToolCallID]; dup {
				t.Fatalf("%s logged twice", en.ToolCallID)
			}
			got[en.ToolCallID] = strings.TrimSpace(en.Change + " " + en.Reason)
			if en.ToolCallID == "call-2" && (en.GrantID != first.EventID || en.Tenant != "acme" || en.By != "billing" || en.RunID != run.ID) {
				t.Errorf("the use's entry %+v: want the grant, its tenant, the agent and the run", en)
			}
		}
	}
	for call, w := range want {
		if got[call] != w {
			t.Errorf("%s: logged %q, want %q", call, got[call], w)
		}
	}
}

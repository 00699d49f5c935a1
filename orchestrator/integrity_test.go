package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// paymentsV1 is the fleet's policy in these tests: a payment needs two of
// the finance people, a rejection vetoes, and time never approves.
const paymentsV1 = `
version: pay-1
rules:
  - name: payments
    tools: [payments.send]
    action: require_approval
    risk: critical
    approvers: [fay, fred, cfo]
    quorum: 2
    timeout: 1h
    on_timeout: reject
`

// paymentsV2 replaces it: one approval is enough.
const paymentsV2 = `
version: pay-2
rules:
  - name: payments
    tools: [payments.send]
    action: require_approval
    approvers: [fay, fred]
    timeout: 1h
`

// integrityEnv is a server with an arbiter that trusts no policy held in
// memory: it knows the built-in default and what is applied to hitl_policy.
type integrityEnv struct {
	*env
	reg *prometheus.Registry
}

func setupIntegrity(t *testing.T) *integrityEnv {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	reg := prometheus.NewRegistry()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Registerer: reg})
	kv, err := js.KeyValue(context.Background(), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	return &integrityEnv{env: &env{srv: srv, js: js, kv: kv}, reg: reg}
}

// gateOn is a gate serving p from memory that the arbiter is not told
// about: its requests verify only if p was applied to the bucket.
func (e *integrityEnv) gateOn(t *testing.T, p *policy.Policy) *orchestrator.Gate {
	t.Helper()
	g, err := orchestrator.NewGate(context.Background(), orchestrator.Config{
		JS: e.srv.JetStreamAs(embedded.RoleOrchestrator), Policy: orchestrator.StaticPolicy{P: p},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func (e *integrityEnv) refusedCount(t *testing.T, reason string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "countersign_requests_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// forged is the request of the security review: a 99,999 EUR payment with
// no approvers, approved by time two seconds after it was published.
func forged(t *testing.T, r contracts.Run, callID, rule, version string) contracts.ApprovalRequested {
	t.Helper()
	args := json.RawMessage(`{"amount":99999,"currency":"EUR","to":"attacker"}`)
	sum, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: orchestrator.EventID(r, callID), Kind: contracts.KindToolApproval,
		Run:      r,
		ToolCall: &contracts.ToolCall{ID: callID, Name: "payments.send", Arguments: args, ArgumentsSHA256: sum},
		Risk:     contracts.RiskLow, Summary: "routine",
		Policy:     contracts.PolicyRef{Rule: rule, Version: version},
		Quorum:     contracts.Quorum{Approvers: []string{}, Order: contracts.OrderAny},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{}, AllowedDecisions: []string{}, Channels: []string{},
		ExpiresAt: now.Add(2 * time.Second), OnTimeout: contracts.OnTimeoutApprove, CreatedAt: now,
	}
}

// TestForgedRequestIsRefused is the attack of the security review: a
// process holding the orchestrator's NATS credential publishes a request
// that time would approve. The arbiter records it rejected from the start,
// never schedules its expiry, announces and counts the refusal, and the
// agent waiting on that call gets a denied verdict with a stable code at
// once instead of an approval (or a wait that never ends).
func TestForgedRequestIsRefused(t *testing.T) {
	e := setupIntegrity(t)
	ctx := context.Background()
	if _, err := orchestrator.ApplyPolicy(ctx, e.srv.JetStreamAs(embedded.RoleAPI), []byte(paymentsV1), "admin", time.Now()); err != nil {
		t.Fatal(err)
	}
	attacker := e.srv.JetStreamAs(embedded.RoleOrchestrator)
	for _, tc := range []struct {
		name, rule, version, refusal string
	}{
		{"as published in the review", "none", "x", contracts.RefusalUnknownPolicyVersion},
		{"naming the live version", "none", "pay-1", contracts.RefusalRuleMismatch},
		{"naming the live version and rule", "payments", "pay-1", contracts.RefusalWeakerThanPolicy},
		{"naming the built-in policy", "default", policy.BuiltinVersion, contracts.RefusalWeakerThanPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := contracts.Run{ID: "run-" + tc.refusal + tc.version, Agent: "payments-bot", RequestedBy: "erin"}
			req := forged(t, r, "pay-1", tc.rule, tc.version)
			before := e.refusedCount(t, tc.refusal)
			if _, err := events.Publish(ctx, attacker, contracts.ToolRequestedSubject(r.Agent), req, req.EventID, nil); err != nil {
				t.Fatal(err)
			}

			// The run that made (or would make) this call waits on it
			// through a gate and is told, without waiting for any deadline.
			gate := e.gateOn(t, countersigntest.Policy(t, paymentsV1))
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			vs, err := gate.Review(rctx, r, []orchestrator.ToolCall{{ID: "pay-1", Name: "payments.send", Arguments: req.ToolCall.Arguments}})
			if err != nil {
				t.Fatalf("review of the forged call: %v (a refused request must not leave the run waiting)", err)
			}
			if v := vs[0]; v.Verdict != orchestrator.VerdictDenied || v.Code != orchestrator.CodeRequestRefused ||
				!strings.Contains(v.Reason, tc.refusal) || v.Permit.Claim(ctx) == nil {
				t.Fatalf("verdict %+v, want denied with code %s naming %s, and no permit", v, orchestrator.CodeRequestRefused, tc.refusal)
			}

			// The record was rejected by countersign in its first and only
			// revision: it never was pending, so time cannot approve it.
			rec := e.waitRecord(t, req.EventID, func(*contracts.Record) bool { return true })
			if rec.Status != contracts.StatusRejected || rec.Outcome == nil ||
				rec.Outcome.Reason != contracts.ReasonRequestRefused+":"+tc.refusal ||
				len(rec.Outcome.DecidedBy) != 1 || rec.Outcome.DecidedBy[0] != contracts.DecidedByCountersign {
				t.Fatalf("record status %s outcome %+v, want rejected by countersign for %s", rec.Status, rec.Outcome, tc.refusal)
			}
			history, err := e.kv.History(ctx, req.EventID)
			if err != nil || len(history) != 1 {
				t.Fatalf("record history: %d revisions, %v; want one", len(history), err)
			}
			timers, err := e.js.Stream(ctx, contracts.StreamTimers)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := timers.GetLastMsgForSubject(ctx, contracts.TimerScheduleSubject(req.EventID, contracts.TimerExpire)); !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Fatalf("an expiry was scheduled for the refused request: %v", err)
			}

			// The refusal is audited on the decided stream and counted.
			// (The record is written before the event is published: wait
			// for the event, which the server hands over once stored.)
			cons, err := e.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{contracts.DecidedSubject(req.EventID)}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				t.Fatalf("no decided event for the refused request: %v", err)
			}
			var d contracts.Decided
			if err := json.Unmarshal(m.Data(), &d); err != nil || d.Status != contracts.StatusRejected || d.Outcome == nil ||
				d.Outcome.Reason != contracts.ReasonRequestRefused+":"+tc.refusal {
				t.Fatalf("decided event %s (%v), want rejected with reason %s", m.Data(), err, tc.refusal)
			}
			if got := e.refusedCount(t, tc.refusal); got != before+1 {
				t.Fatalf("countersign_requests_refused_total{reason=%q} = %v, want %v", tc.refusal, got, before+1)
			}
		})
	}
}

// TestRequestsVerifyAgainstEveryAppliedVersion: requests made under a
// policy applied through the store are created and decided as before,
// and after a new version is applied, requests naming the old one still
// verify against it. A version never applied is refused.
func TestRequestsVerifyAgainstEveryAppliedVersion(t *testing.T) {
	e := setupIntegrity(t)
	ctx := context.Background()
	apiJS := e.srv.JetStreamAs(embedded.RoleAPI)
	store, err := orchestrator.OpenPolicyStore(ctx, orchestrator.PolicyStoreConfig{JS: e.srv.JetStreamAs(embedded.RoleOrchestrator)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	live, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: e.srv.JetStreamAs(embedded.RoleOrchestrator), Policy: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close() })
	res, err := orchestrator.ApplyPolicy(ctx, apiJS, []byte(paymentsV1), "admin", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WaitRevision(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	r := contracts.Run{ID: "run-live", Agent: "payments-bot", RequestedBy: "erin"}
	pay := []orchestrator.ToolCall{{ID: "p1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":50}`)}}
	vs, err := live.Submit(ctx, r, pay)
	if err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord(t, vs[0].EventID, func(*contracts.Record) bool { return true })
	if rec.Status != contracts.StatusPending || rec.Request.Policy.Version != "pay-1" {
		t.Fatalf("a request under the applied policy: status %s version %s, want pending under pay-1", rec.Status, rec.Request.Policy.Version)
	}
	e.vote(t, vs[0].EventID, "fay", contracts.DecisionApprove, "")
	e.vote(t, vs[0].EventID, "cfo", contracts.DecisionApprove, "")
	if rec := e.waitRecord(t, vs[0].EventID, func(r *contracts.Record) bool { return r.Terminal() }); rec.Status != contracts.StatusApproved {
		t.Fatalf("status %s after two approvals, want approved", rec.Status)
	}

	// pay-2 goes live; a gate still on pay-1 (a replica that has not
	// switched yet) makes a request naming pay-1, which the arbiter has not
	// read before: it reads it from the bucket and the request verifies.
	if res, err = orchestrator.ApplyPolicy(ctx, apiJS, []byte(paymentsV2), "admin", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := store.WaitRevision(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	old := e.gateOn(t, countersigntest.Policy(t, paymentsV1))
	vs, err = old.Submit(ctx, contracts.Run{ID: "run-old", Agent: "payments-bot"}, pay)
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.waitRecord(t, vs[0].EventID, func(*contracts.Record) bool { return true }); rec.Status != contracts.StatusPending || rec.Request.Policy.Version != "pay-1" {
		t.Fatalf("a request naming the replaced version: status %s version %s outcome %+v, want pending under pay-1",
			rec.Status, rec.Request.Policy.Version, rec.Outcome)
	}
	vs, err = live.Submit(ctx, contracts.Run{ID: "run-new", Agent: "payments-bot"}, pay)
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.waitRecord(t, vs[0].EventID, func(*contracts.Record) bool { return true }); rec.Status != contracts.StatusPending || rec.Request.Policy.Version != "pay-2" {
		t.Fatalf("a request under the new version: status %s version %s, want pending under pay-2", rec.Status, rec.Request.Policy.Version)
	}

	// A gate on a policy nobody applied (nor told the arbiter about) is
	// refused: nothing vouches for its snapshot.
	stray := e.gateOn(t, countersigntest.Policy(t, strings.Replace(paymentsV2, "pay-2", "pay-stray", 1)))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	vs, err = stray.Review(rctx, contracts.Run{ID: "run-stray", Agent: "payments-bot"}, pay)
	if err != nil {
		t.Fatal(err)
	}
	if vs[0].Verdict != orchestrator.VerdictDenied || vs[0].Code != orchestrator.CodeRequestRefused ||
		!strings.Contains(vs[0].Reason, contracts.RefusalUnknownPolicyVersion) {
		t.Fatalf("a request under an unknown version: %+v, want denied, request_refused (unknown_policy_version)", vs[0])
	}
}

// TestRequestsVerifyAgainstVersionsAnEarlierReleaseStored: before versions
// had keys of their own, the policy lived only under the live key; the
// versions its history holds still verify requests.
func TestRequestsVerifyAgainstVersionsAnEarlierReleaseStored(t *testing.T) {
	e := setupIntegrity(t)
	ctx := context.Background()
	bucket := storedAsEarlierReleases(t, e.js, paymentsV1, paymentsV2)
	pay := []orchestrator.ToolCall{{ID: "p1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":50}`)}}
	for i, src := range []string{paymentsV1, paymentsV2} {
		p := countersigntest.Policy(t, src)
		if _, err := bucket.Get(ctx, orchestrator.PolicyVersionKey(p.Version())); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("version %s has a key of its own (%v); this test needs the earlier layout", p.Version(), err)
		}
		vs, err := e.gateOn(t, p).Submit(ctx, contracts.Run{ID: "run-" + p.Version(), Agent: "payments-bot"}, pay)
		if err != nil {
			t.Fatal(err)
		}
		rec := e.waitRecord(t, vs[0].EventID, func(*contracts.Record) bool { return true })
		if rec.Status != contracts.StatusPending || rec.Request.Policy.Version != p.Version() {
			t.Fatalf("request %d under %s: status %s outcome %+v, want pending", i, p.Version(), rec.Status, rec.Outcome)
		}
	}
}

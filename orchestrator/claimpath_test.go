package orchestrator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// A claim is asked of the arbiter by request and stores no command; when
// no arbiter answers requests, the claim goes to the command subject,
// where it waits for an arbiter, and the gate's next claims take that way
// at once for a while.
func TestClaimsTakeTheCommandSubjectWhenNoArbiterAnswers(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	pol := countersigntest.Policy(t, testPolicy)
	// The arbiters of the subtest below know the policy from their config.
	arbCfg := arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Policies: arbiter.Policies{pol}}
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: pol})
	e := &env{srv: srv, js: js, kv: kv, gate: gate}
	resolutions, err := js.Stream(ctx, contracts.StreamResolutions)
	if err != nil {
		t.Fatal(err)
	}
	commandsStored := func(eventID string) int {
		t.Helper()
		n := 0
		if _, err := resolutions.GetLastMsgForSubject(ctx, contracts.CommandSubject(eventID)); err == nil {
			n = 1
		}
		return n
	}
	approve := func(t *testing.T, id string) *orchestrator.Permit {
		t.Helper()
		call := orchestrator.ToolCall{ID: id, Name: "payments.send", Arguments: json.RawMessage(`{"recipient":"ACME GmbH","amount":250}`)}
		eventID := orchestrator.EventID(run, call.ID)
		got := make(chan []orchestrator.Verdict, 1)
		go func() {
			v, err := gate.Review(ctx, run, []orchestrator.ToolCall{call})
			if err != nil {
				t.Error(err)
			}
			got <- v
		}()
		e.waitRecord(t, eventID, pending)
		e.vote(t, eventID, "alice", contracts.DecisionApprove, "")
		v := <-got
		if len(v) != 1 || v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v", v)
		}
		return v[0].Permit
	}

	var first, second *orchestrator.Permit
	t.Run("claims by request while an arbiter answers", func(t *testing.T) {
		countersigntest.RunArbiter(t, arbCfg) // stops when this subtest ends
		p := approve(t, "pay-1")
		if err := p.Claim(ctx); err != nil {
			t.Fatal(err)
		}
		if n := commandsStored(orchestrator.EventID(run, "pay-1")); n != 0 {
			t.Fatalf("a claim answered by request stored %d command", n)
		}
		first, second = approve(t, "pay-2"), approve(t, "pay-3")
	})
	if first == nil {
		t.FailNow()
	}

	// No arbiter now: the request finds no responders; the claim is stored
	// and applied once an arbiter runs again.
	claimed := make(chan error, 1)
	go func() { claimed <- first.Claim(ctx) }()
	c, err := js.OrderedConsumer(ctx, contracts.StreamResolutions, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.CommandSubject(orchestrator.EventID(run, "pay-2"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(jetstream.FetchContext(ctx)); err != nil {
		t.Fatalf("the claim was not published on the command subject: %v", err)
	}
	countersigntest.RunArbiter(t, arbCfg)
	if err := <-claimed; err != nil {
		t.Fatalf("claim through the command subject: %v", err)
	}
	rec := e.waitRecord(t, orchestrator.EventID(run, "pay-2"), func(r *contracts.Record) bool { return r.Claim != nil })
	if rec.Claim.ClaimID != first.ClaimID() {
		t.Fatalf("claimed by %q, want %q", rec.Claim.ClaimID, first.ClaimID())
	}
	// For a while after, this gate's claims take the command subject at
	// once, though an arbiter answers again.
	if err := second.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandsStored(orchestrator.EventID(run, "pay-3")); n != 1 {
		t.Fatalf("a claim during the pause stored %d commands, want 1", n)
	}
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// TestPermitCarriesTheReceipt: after a successful Claim the permit holds
// the receipt the arbiter signed, which verifies for the allowed call.
func TestPermitCarriesTheReceipt(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	key, _ := receipt.GenerateKey()
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Receipts: signer})
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: countersigntest.Policy(t, testPolicy)})
	kv, err := js.KeyValue(context.Background(), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, js: js, kv: kv, gate: gate}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := orchestrator.ToolCall{ID: "pay-r", Name: "payments.send", Arguments: json.RawMessage(`{"recipient":"ACME GmbH","amount":250}`)}
	eventID := orchestrator.EventID(run, call.ID)
	done := make(chan []orchestrator.Verdict, 1)
	go func() {
		v, err := gate.Review(ctx, run, []orchestrator.ToolCall{call})
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	e.waitRecord(t, eventID, pending)
	e.vote(t, eventID, "alice", contracts.DecisionApprove, "")
	v := (<-done)[0]
	if v.Permit.Receipt() != "" {
		t.Fatal("a receipt before the claim")
	}
	if err := v.Permit.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := receipt.Verify(ctx, v.Permit.Receipt(), call.Name, v.Arguments, receipt.Options{Keys: receipt.NewKeySet(key), Replay: receipt.NewMemoryReplayStore()})
	if err != nil {
		t.Fatalf("the permit's receipt: %v", err)
	}
	if c.EventID != eventID || c.ClaimID != v.Permit.ClaimID() {
		t.Fatalf("claims %+v", c)
	}
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
)

// entry is one change of the approvals bucket as a watch hands it over.
type entry struct {
	key   string
	value []byte
	rev   uint64
}

func (e entry) Bucket() string                  { return contracts.BucketApprovals }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// A wait is never handed a record older than one it has seen: a change
// read before the wait registered, delivered after its own read, is left
// out (a claim's wait would otherwise take an approved record for a
// pending one and fail as not approved).
func TestWaitNeverGoesBack(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := orchestrator.NewFedWaiter(ctx, e.srv.JetStreamAs(embedded.RoleOrchestrator), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := contracts.Run{ID: "order", Agent: "billing-bot", RequestedBy: "agent:billing"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1}`)}
	if _, err := e.gate.Submit(ctx, r, []orchestrator.ToolCall{call}); err != nil {
		t.Fatal(err)
	}
	id := orchestrator.EventID(r, call.ID)
	pendingRec := e.waitRecord(t, id, pending)
	pendingEntry, err := e.kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	e.waitRecord(t, id, func(r *contracts.Record) bool { return r.Terminal() })

	var seen []string
	if _, err := w.Watch(ctx, id, func(rec *contracts.Record, _ uint64) bool {
		seen = append(seen, rec.Status)
		return false
	}); err != nil {
		t.Fatal(err)
	}
	// The stale change arrives after the wait's own read of the decision.
	w.Observe(entry{key: id, value: pendingEntry.Value(), rev: pendingEntry.Revision()})
	if len(seen) != 1 || seen[0] != contracts.StatusApproved || pendingRec.Status != contracts.StatusPending {
		t.Fatalf("the wait saw %v, want only [approved]", seen)
	}
}

package arbiter_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// decidedEntries counts the audit log's "decided" entries of id.
func (b *bus) decidedEntries(id string) int {
	n := 0
	for _, e := range b.auditEntries() {
		if e.entry.EventID == id && e.entry.Change == audit.ChangeDecided {
			n++
		}
	}
	return n
}

// A decision written by a vote asked by request, whose arbiter stopped
// before announcing it and whose asker stopped too (kill -9 of a process
// running both), is announced, logged and granted by the next arbiter to
// start; a decision already announced is neither announced nor logged again.
func TestAStartingArbiterAnnouncesADecisionLeftUnannounced(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	stop := b.startArbiter(arbiter.Config{})
	b.create(request(t))
	stop()

	// What the stopped arbiter wrote before it could announce: the record,
	// decided by alice's vote (asked by request: stored nowhere else).
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	rec, rev := b.record(eventID)
	v := vote("v-alice", "alice", contracts.DecisionApprove)
	rec.Votes = append(rec.Votes, v)
	rec.Status = contracts.StatusApproved
	rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, Arguments: rec.Request.ToolCall.Arguments,
		ArgumentsSHA256: rec.Request.ToolCall.ArgumentsSHA256, DecidedBy: []string{"alice"}, DecidedAt: busNow()}
	data, err := contracts.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecordWriter(b.srv.JetStreamAs(embedded.RoleArbiter)).Update(ctx, eventID, data, &rec, rev); err != nil {
		t.Fatal(err)
	}
	if got := len(b.decidedEvents(eventID)); got != 0 {
		t.Fatalf("%d decided events before the restart", got)
	}

	stop = b.startArbiter(arbiter.Config{})
	b.waitMessage(contracts.StreamEvents, contracts.DecidedSubject(eventID))
	stop()
	if got := b.decidedEvents(eventID); len(got) != 1 || got[0].Status != contracts.StatusApproved || got[0].Revision != rev+1 {
		t.Fatalf("decided events after the restart: %+v", got)
	}
	if got := b.decidedEntries(eventID); got != 1 {
		t.Fatalf("%d decided entries in the audit log, want 1", got)
	}

	// Started again (and stopped: Run returns once its start-up sweep is
	// over): the decision is announced already, nothing is added.
	stop = b.startArbiter(arbiter.Config{})
	b.create(request(t, func(r *contracts.ApprovalRequested) { r.EventID = "0193b3c4-0000-7000-8000-0000000000aa" }))
	stop()
	if got := len(b.decidedEvents(eventID)); got != 1 {
		t.Fatalf("%d decided events after a second start, want 1", got)
	}
	if got := b.decidedEntries(eventID); got != 1 {
		t.Fatalf("%d decided entries after a second start, want 1", got)
	}
}

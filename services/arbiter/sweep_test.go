package arbiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// sweepDone is an arbiter logger that closes done once the start-up sweep
// says it is over.
func sweepDone() (*slog.Logger, <-chan struct{}) {
	done := make(chan struct{})
	h := &doneHandler{msg: "the start-up look for decisions left unannounced", done: done}
	return slog.New(h), done
}

// awaitSweep waits for the sweep's end, bounded by busWait.
func awaitSweep(t *testing.T, swept <-chan struct{}) {
	t.Helper()
	select {
	case <-swept:
	case <-time.After(busWait):
		t.Fatal("the start-up sweep did not end")
	}
}

type doneHandler struct {
	msg  string
	once sync.Once
	done chan struct{}
}

func (h *doneHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *doneHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) || strings.HasPrefix(r.Message, "decisions left unannounced") {
		h.once.Do(func() { close(h.done) })
	}
	return nil
}
func (h *doneHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *doneHandler) WithGroup(string) slog.Handler      { return h }

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

	// Started again, and stopped once its start-up sweep is over: the
	// decision is announced already, nothing is added.
	log, swept := sweepDone()
	stop = b.startArbiter(arbiter.Config{Logger: log})
	b.create(request(t, func(r *contracts.ApprovalRequested) { r.EventID = "0193b3c4-0000-7000-8000-0000000000aa" }))
	awaitSweep(t, swept)
	stop()
	if got := len(b.decidedEvents(eventID)); got != 1 {
		t.Fatalf("%d decided events after a second start, want 1", got)
	}
	if got := b.decidedEntries(eventID); got != 1 {
		t.Fatalf("%d decided entries after a second start, want 1", got)
	}
}

// The start-up sweep reads the records written last in one continuous pull,
// not one pull request a record (which took about 10 ms a record on a long
// history and held up a stop until it was over).
func TestTheStartUpSweepReadsTheLastWritesInFewPulls(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	w := events.NewRecordWriter(b.srv.JetStreamAs(embedded.RoleArbiter))
	const records = 300
	for i := range records {
		req := request(t, func(r *contracts.ApprovalRequested) { r.EventID = fmt.Sprintf("0193b3c4-0000-7000-8000-%012d", i) })
		rec := approval.NewRecord(req, busNow())
		data, err := contracts.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Create(ctx, req.EventID, data, &rec); err != nil {
			t.Fatal(err)
		}
	}
	pulls := make(chan *nats.Msg, 4*records)
	nc := b.srv.Connect()
	if _, err := nc.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT."+events.RecordStream+".>", pulls); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	log, swept := sweepDone()
	stop := b.startArbiter(arbiter.Config{Logger: log})
	awaitSweep(t, swept)
	stop()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(pulls); n == 0 || n > 10 {
		t.Fatalf("the sweep of %d records made %d pull requests, want a few", records, n)
	}
}

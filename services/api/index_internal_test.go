package api

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/countersigntest"
)

// The index holds every pending record and at most IndexRecent decided
// ones, whatever the history's size: at start and while records change.
func TestIndexMemoryIsBoundedByPendingWork(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := events.NewRecordWriter(srv.JetStreamAs(embedded.RoleArbiter))
	write := func(n int, status string) {
		for range n {
			req := contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(),
				Kind: contracts.KindToolApproval, Run: contracts.Run{Agent: "a"}, CreatedAt: time.Now()}
			rec := approval.NewRecord(req, time.Now())
			rec.Status = status
			data, err := contracts.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Create(ctx, req.EventID, data, &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(7, contracts.StatusPending)
	write(300, contracts.StatusApproved)
	reg := prometheus.NewRegistry()
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	s, err := New(ctx, Config{JS: apiJS, Gate: countersigntest.Gate(t, apiJS, nil), Registerer: reg, Gatherer: reg, IndexRecent: 25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	check := func(when string, pending int) {
		t.Helper()
		if err := s.index.catchUp(ctx); err != nil {
			t.Fatal(err)
		}
		s.index.mu.Lock()
		defer s.index.mu.Unlock()
		if got := len(s.index.byID); got != pending+25 || s.index.pending != pending || s.index.decided != 25 {
			t.Errorf("%s: index holds %d records (%d pending, %d decided), want %d pending and 25 decided",
				when, got, s.index.pending, s.index.decided, pending)
		}
		if len(s.index.order) != len(s.index.byID) {
			t.Errorf("%s: %d in order, %d by id", when, len(s.index.order), len(s.index.byID))
		}
	}
	check("at start", 7)
	write(500, contracts.StatusRejected)
	write(3, contracts.StatusPending)
	check("after 503 more", 10)
}

// ackPosition reads what nats.Msg.Metadata reads, in both subject forms.
func TestAckPositionMatchesTheClientsMetadata(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.KV_hitl_approvals.cons.1.4711.3.1732440000000000000.99",
		"$JS.ACK.hub.ACCHASH.KV_hitl_approvals.cons.2.12.5.1732440000000000000.0.rnd",
		"$JS.ACK._.ACCHASH.KV_hitl_approvals.cons.2.12.5.1732440000000000000.7",
	} {
		md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if err != nil {
			t.Fatalf("%s: %v", reply, err)
		}
		seq, pending, ok := ackPosition(reply)
		if !ok || seq != md.Sequence.Stream || pending != md.NumPending {
			t.Errorf("%s: %d %d %v, want %d %d", reply, seq, pending, ok, md.Sequence.Stream, md.NumPending)
		}
	}
	for _, bad := range []string{"", "_INBOX.x", "$JS.ACK.a.b.c", "$JS.ACK.s.c.1.x.3.4.5"} {
		if _, _, ok := ackPosition(bad); ok {
			t.Errorf("%q read as a position", bad)
		}
	}
}

// Oversight says when its window reaches back past what the index holds.
func TestOversightSaysWhenDecidedRequestsWereLeftOut(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	ctx := context.Background()
	w := events.NewRecordWriter(srv.JetStreamAs(embedded.RoleArbiter))
	start := time.Now().Add(-48 * time.Hour)
	for i := range 40 {
		created := start.Add(time.Duration(i) * time.Hour)
		req := contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(),
			Kind: contracts.KindToolApproval, Run: contracts.Run{Agent: "a"}, CreatedAt: created}
		rec := approval.NewRecord(req, created)
		rec.Status = contracts.StatusApproved
		data, err := contracts.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Create(ctx, req.EventID, data, &rec); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	s, err := New(ctx, Config{JS: apiJS, Gate: countersigntest.Gate(t, apiJS, nil), Registerer: reg, Gatherer: reg, IndexRecent: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	admin := Principal{Subject: "root", Roles: []string{RoleAdmin}}
	// The index holds the ten newest (created 30 to 39 hours after start).
	for _, c := range []struct {
		since   time.Time
		partial bool
	}{{start, true}, {start.Add(29 * time.Hour), true}, {start.Add(29*time.Hour + time.Minute), false}, {start.Add(35 * time.Hour), false}} {
		rep, aerr := s.Oversight(ctx, admin, OversightQuery{Since: c.since})
		if aerr != nil {
			t.Fatal(aerr)
		}
		if rep.Partial != c.partial {
			t.Errorf("since %s: partial %v, want %v", c.since.Sub(start), rep.Partial, c.partial)
		}
	}
}

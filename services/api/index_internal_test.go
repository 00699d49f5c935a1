package api

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
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

package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// Records written with their summary headers read back as the bucket's
// own entries, the headers tell the record's status, agent, run, tenant
// and creation, and the writer keeps the bucket's create and update
// semantics (ErrKeyExists, ErrKeyRevisionMismatch).
func TestRecordWriterKeepsTheBucketsSemantics(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	ctx := context.Background()
	js := srv.JetStreamAs(embedded.RoleArbiter)
	w := events.NewRecordWriter(js)
	created := time.Date(2026, 11, 24, 9, 0, 0, 123, time.UTC)
	rec := contracts.Record{Status: contracts.StatusPending, Request: contracts.ApprovalRequested{
		EventID: "rec-1", CreatedAt: created, Run: contracts.Run{ID: "run 7\r\nX-Injected: 1", Agent: "billing bot", Tenant: "acme"},
	}}
	rev, err := w.Create(ctx, "rec-1", []byte(`{"v":1}`), &rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "rec-1", []byte(`{"v":2}`), &rec); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("second create: %v, want ErrKeyExists", err)
	}
	rec.Status = contracts.StatusApproved
	if _, err := w.Update(ctx, "rec-1", []byte(`{"v":3}`), &rec, rev+5); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("update at a wrong revision: %v, want ErrKeyRevisionMismatch", err)
	}
	rev2, err := w.Update(ctx, "rec-1", []byte(`{"v":4}`), &rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "not a key!", nil, &rec); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Errorf("create with an invalid key: %v", err)
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "rec-1")
	if err != nil || string(e.Value()) != `{"v":4}` || e.Revision() != rev2 {
		t.Fatalf("get: %v %v", e, err)
	}
	st, err := js.Stream(ctx, events.RecordStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, rev2)
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := events.ParseRecordHeader(raw.Header)
	want := events.RecordSummary{Status: contracts.StatusApproved, CreatedAt: created, Agent: "billing bot", RunID: "run 7\r\nX-Injected: 1", Tenant: "acme"}
	if !ok || sum.Status != want.Status || !sum.CreatedAt.Equal(want.CreatedAt) || sum.Agent != want.Agent || sum.RunID != want.RunID || sum.Tenant != want.Tenant {
		t.Errorf("headers say %+v (%v), want %+v", sum, ok, want)
	}
	if raw.Header.Get("X-Injected") != "" {
		t.Error("a run id wrote a header of its own")
	}
	if _, ok := events.ParseRecordHeader(nil); ok {
		t.Error("no headers parsed as a summary")
	}
}

package events_test

import (
	"context"
	"encoding/json"
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
	rec := contracts.Record{Spec: contracts.SpecRecord, Status: contracts.StatusPending, Request: contracts.ApprovalRequested{
		EventID: "rec-1", CreatedAt: created, Run: contracts.Run{ID: "run 7\r\nX-Injected: 1", Agent: "billing bot", Tenant: "acme"},
	}}
	first, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := w.Create(ctx, "rec-1", first, &rec)
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

// The approvals bucket takes a second message on a key only as a roll-up,
// which the record writer makes of every revision after the first: a plain
// publish on a record's key (what the server publishes there as the answer
// to a request naming it as the reply) is refused. A key's first message
// that is not its record is replaced by the record's creation.
func TestOnlyTheRecordWriterReplacesAKeysValue(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	ctx := context.Background()
	w := events.NewRecordWriter(srv.JetStreamAs(embedded.RoleArbiter))
	rec := contracts.Record{Spec: contracts.SpecRecord, Status: contracts.StatusPending,
		Request: contracts.ApprovalRequested{EventID: "rec-2"}}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Something that is no record, stored before the record.
	if _, err := admin.Publish(ctx, events.RecordSubject("rec-2"), []byte(`{"type":"io.nats.jetstream.api.v1.account_info_response"}`)); err != nil {
		t.Fatal(err)
	}
	rev, err := w.Create(ctx, "rec-2", data, &rec)
	if err != nil {
		t.Fatalf("create over a value that is no record: %v", err)
	}
	// Plain publishes on the record's key, with and without an expected
	// revision: refused, the record stays.
	for _, opts := range [][]jetstream.PublishOpt{nil, {jetstream.WithExpectLastSequencePerSubject(rev)}} {
		if _, err := admin.Publish(ctx, events.RecordSubject("rec-2"), []byte(`{}`), opts...); err == nil {
			t.Error("a plain publish on a record's key was stored")
		}
	}
	kv, err := admin.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "rec-2"); err != nil || e.Revision() != rev || string(e.Value()) != string(data) {
		t.Fatalf("the record after the publishes: %v, %v", e, err)
	}
	rec.Status = contracts.StatusApproved
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Update(ctx, "rec-2", data, &rec, rev); err != nil {
		t.Fatalf("the writer's update: %v", err)
	}
}

// Every bucket keeps one value per key and takes a second message on a key
// only as a roll-up: a plain publish on a key that holds a value is
// refused, a roll-up (events.UpdateKey) replaces it.
func TestBucketsOfOneValuePerKeyTakeUpdatesOnlyAsRollUps(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	ctx := context.Background()
	for _, bucket := range []string{contracts.BucketApprovals, contracts.BucketPolicy, contracts.BucketGrants, contracts.BucketSessions,
		contracts.BucketReceipts, contracts.BucketReceiptUses, contracts.BucketPasskeys, contracts.BucketPush} {
		subject := "$KV." + bucket + ".k"
		first, err := admin.Publish(ctx, subject, []byte(`{"v":1}`))
		if err != nil {
			t.Fatalf("%s: first write: %v", bucket, err)
		}
		if _, err := admin.Publish(ctx, subject, []byte(`{"v":2}`)); err == nil {
			t.Errorf("%s: a plain second write was stored", bucket)
		}
		rev, err := events.UpdateKey(ctx, admin, bucket, "k", []byte(`{"v":3}`), first.Sequence)
		if err != nil {
			t.Fatalf("%s: update: %v", bucket, err)
		}
		if _, err := events.UpdateKey(ctx, admin, bucket, "k", []byte(`{"v":4}`), first.Sequence); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			t.Errorf("%s: an update over an old revision: %v", bucket, err)
		}
		if rev == 0 {
			t.Errorf("%s: no revision", bucket)
		}
	}
}

package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/events/embedded"
)

// TestOnlyArbiterAppendsTheAuditLog: the arbiter appends entries and reads
// the log back; the API reads it (exports) and the notifier with an audit
// sink's durable consumer, acknowledging what it delivered, and neither may
// write it; no other role may write it or read it.
func TestOnlyArbiterAppendsTheAuditLog(t *testing.T) {
	e := newEnv(t)
	arb := e.connect(t, embedded.RoleArbiter)
	ctx := testContext(t, opTimeout)
	entry := &audit.Entry{Change: audit.ChangeCreated, EventID: "x", At: time.Now()}
	if _, err := auditlog.Append(ctx, arb.js, entry, "a-1"); err != nil {
		t.Fatalf("the arbiter appends: %v", err)
	}
	if _, _, err := auditlog.State(ctx, arb.js); err != nil {
		t.Fatalf("the arbiter reads the log: %v", err)
	}
	arb.noErrors(t)
	api := e.connect(t, embedded.RoleAPI)
	n := 0
	if err := auditlog.Read(ctx, api.js, 1, 1, func(uint64, jetstream.Msg) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("the API reads the log: %d entries, %v", n, err)
	}
	api.noErrors(t)
	notifier := e.connect(t, embedded.RoleNotifier)
	cons, err := notifier.js.CreateOrUpdateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{
		Durable: "audit-sink-siem", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: audit.SubjectEntryPrefix + ">",
	})
	if err != nil {
		t.Fatalf("the notifier creates an audit sink's durable: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(opTimeout))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("the notifier acknowledges what a sink took: %v", err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("the notifier's sink read %d entries, want 1", n-1)
	}
	notifier.noErrors(t)
	for _, r := range []embedded.Role{embedded.RoleAPI, embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleNotifier} {
		c := api
		switch r {
		case embedded.RoleNotifier:
			c = notifier
		case embedded.RoleAPI:
		default:
			c = e.connect(t, r)
		}
		for _, subj := range []string{entry.Subject(), audit.SubjectCheckpoint} {
			c.denied(t, subj, func(ctx context.Context) error {
				_, err := c.js.Publish(ctx, subj, []byte(`{}`))
				return err
			})
		}
		if r == embedded.RoleAPI || r == embedded.RoleNotifier {
			continue
		}
		stream := "$JS.API.STREAM.INFO." + audit.Stream
		c.denied(t, stream, func(ctx context.Context) error {
			_, _, err := auditlog.State(ctx, c.js)
			return err
		})
	}
}

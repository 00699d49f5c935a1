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
// the log back; the API reads it (exports) and may not write it; no other
// role may write it or read it.
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
	for _, r := range []embedded.Role{embedded.RoleAPI, embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleNotifier} {
		c := api
		if r != embedded.RoleAPI {
			c = e.connect(t, r)
		}
		for _, subj := range []string{entry.Subject(), audit.SubjectCheckpoint} {
			c.denied(t, subj, func(ctx context.Context) error {
				_, err := c.js.Publish(ctx, subj, []byte(`{}`))
				return err
			})
		}
		if r == embedded.RoleAPI {
			continue
		}
		stream := "$JS.API.STREAM.INFO." + audit.Stream
		c.denied(t, stream, func(ctx context.Context) error {
			_, _, err := auditlog.State(ctx, c.js)
			return err
		})
	}
}

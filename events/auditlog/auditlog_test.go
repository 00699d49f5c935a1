package auditlog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// TestCompetingCheckpointersMakeOneChain: four signers race to sign the
// same entries, each time; of each race one checkpoint is stored and the
// others continue from it, so the log is one chain that verifies, every
// entry signed once; an append sent again is stored once.
func TestCompetingCheckpointersMakeOneChain(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	js := srv.JetStreamAs(embedded.RoleArbiter)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	signer := newSigner(t)
	for i := range 20 {
		e := &audit.Entry{Change: audit.ChangeCreated, EventID: fmt.Sprintf("ev-%02d", i), At: time.Now()}
		for range 2 { // sent twice, stored once
			if _, err := auditlog.Append(ctx, js, e, "created:"+e.EventID); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := auditlog.CheckpointConfig{JS: js, Signer: signer, Every: 3, Interval: time.Nanosecond}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				n, err := auditlog.Checkpoint(ctx, cfg)
				if err != nil {
					t.Error(err)
					return
				}
				_, last, err := auditlog.State(ctx, js)
				if err != nil {
					t.Error(err)
					return
				}
				// Done when no entry waits: the last message is a checkpoint.
				if n == 0 && coversAll(ctx, t, js, last) {
					return
				}
			}
		})
	}
	wg.Wait()
	var bundle bytes.Buffer
	if err := auditlog.Export(ctx, js, &bundle, audit.Header{Keys: signer.Keys().JWKS()}, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, rep, err := audit.Verify(ctx, &bundle, signer.Keys())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Entries != 20 || rep.Signed != 20 || rep.Checkpoints != 7 {
		t.Fatalf("report %+v: want 20 entries signed once by 7 checkpoints in one chain", rep)
	}
}

// coversAll reports whether the log's last message, at seq, is a
// checkpoint ending at entry 20, the last.
func coversAll(ctx context.Context, t *testing.T, js jetstream.JetStream, seq uint64) bool {
	st, err := js.Stream(ctx, audit.Stream)
	if err != nil {
		t.Error(err)
		return true
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Error(err)
		return true
	}
	if m.Subject != audit.SubjectCheckpoint {
		return false
	}
	c, err := audit.PayloadOf(string(m.Data))
	if err != nil {
		t.Error(err)
		return true
	}
	return c.Last().Seq == 20
}

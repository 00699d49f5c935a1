package auditlog_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// Any credential can have the server publish its answer to a request (here
// an account info) on the log's subjects, by naming them as the reply: the
// log, which deletes nothing, stores it. Such a message is no entry and no
// checkpoint. Checkpoints go on over it and sign every entry; the export
// and its verification name it, and nothing else.
func TestAnswersStoredInTheLogStopNoCheckpoint(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	js := srv.JetStreamAs(embedded.RoleArbiter)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	signer := newSigner(t)
	cfg := auditlog.CheckpointConfig{JS: js, Signer: signer, Every: 3, Interval: time.Nanosecond}
	appendN := func(from, n int) {
		for i := from; i < from+n; i++ {
			e := &audit.Entry{Change: audit.ChangeCreated, EventID: "ev-" + string(rune('a'+i)), At: time.Now()}
			if _, err := auditlog.Append(ctx, js, e, "created:"+e.EventID); err != nil {
				t.Fatal(err)
			}
		}
	}
	signAll := func(entries uint64) {
		for {
			n, err := auditlog.Checkpoint(ctx, cfg)
			if err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
			if n == 0 && lastCheckpointEndsAt(ctx, t, js) == entries {
				return
			}
		}
	}
	appendN(0, 4)
	signAll(4)

	// The answers land on the entries' subject and the checkpoints'.
	admin := srv.JetStream()
	stored := make(chan uint64, 2)
	cons, err := admin.OrderedConsumer(ctx, audit.Stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil {
			stored <- md.Sequence.Stream
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	resolver := srv.JetStreamAs(embedded.RoleResolver).Conn()
	for _, subject := range []string{audit.SubjectPrefix + "batch", audit.SubjectCheckpoint} {
		if err := resolver.PublishMsg(&nats.Msg{Subject: "$JS.API.INFO", Reply: subject}); err != nil {
			t.Fatal(err)
		}
	}
	var junk []uint64
	for range 2 {
		select {
		case seq := <-stored:
			junk = append(junk, seq)
		case <-ctx.Done():
			t.Fatal("the answers were not stored in the log")
		}
	}
	cc.Stop()

	appendN(4, 5)
	_, last, err := auditlog.State(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	signAll(last) // the last entry's sequence: every entry appended is signed

	var bundle bytes.Buffer
	if err := auditlog.Export(ctx, js, &bundle, audit.Header{Keys: signer.Keys().JWKS()}, time.Time{}, time.Time{}); err != nil {
		t.Fatalf("export: %v", err)
	}
	_, rep, err := audit.Verify(ctx, &bundle, signer.Keys())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Signed != 9 {
		t.Errorf("%d entries signed, want the 9 appended: %+v", rep.Signed, rep)
	}
	for _, p := range rep.Problems {
		switch {
		case p.Kind == audit.ProblemInserted && (p.Seq == junk[0] || p.Seq == junk[1]):
		case p.Kind == audit.ProblemCheckpoint && p.Seq == 0:
		default:
			t.Errorf("problem %+v; the answers are at %v", p, junk)
		}
	}
}

// lastCheckpointEndsAt is the sequence of the last entry the log's newest
// readable checkpoint signs (0: none).
func lastCheckpointEndsAt(ctx context.Context, t *testing.T, js jetstream.JetStream) uint64 {
	st, err := js.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0; seq-- {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || m.Subject != audit.SubjectCheckpoint {
			continue
		}
		if c, err := audit.PayloadOf(string(m.Data)); err == nil {
			return c.Last().Seq
		}
	}
	return 0
}

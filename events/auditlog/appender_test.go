package auditlog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// heldJS holds the first publish until release is closed.
type heldJS struct {
	jetstream.JetStream
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (h *heldJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	h.once.Do(func() {
		close(h.started)
		<-h.release
	})
	return h.JetStream.PublishMsg(ctx, m, opts...)
}

// TestAppenderCommitsWhatArrivesMeanwhileAsOneBatch: while one write is on
// its way, 299 appends arrive; they are stored as two batches (256 and
// 43), not 299 messages; every entry is in the log once, in one chain that
// checkpoints (which hold whole messages) sign and that verifies; an
// entry appended alone twice under one id is stored once.
func TestAppenderCommitsWhatArrivesMeanwhileAsOneBatch(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	js := srv.JetStreamAs(embedded.RoleArbiter)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held := &heldJS{JetStream: js, started: make(chan struct{}), release: make(chan struct{})}
	app := auditlog.NewAppender(held)
	entry := func(i int) *audit.Entry {
		return &audit.Entry{Change: audit.ChangeCreated, EventID: fmt.Sprintf("ev-%03d", i), At: time.Now()}
	}
	errs := make(chan error, 300)
	go func() { errs <- app.Append(ctx, entry(0), "created:ev-000") }()
	<-held.started
	for i := 1; i < 300; i++ {
		go func() { errs <- app.Append(ctx, entry(i), fmt.Sprintf("created:ev-%03d", i)) }()
	}
	for app.Queued() < 299 {
		select {
		case err := <-errs:
			t.Fatalf("an append returned while the first write was held: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	close(held.release)
	for range 300 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Alone again, under an id already stored: de-duplicated.
	if err := app.Append(ctx, entry(0), "created:ev-000"); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	seen := map[string]int{}
	err := auditlog.Read(ctx, js, 1, lastSeq(ctx, t, js), func(seq uint64, m jetstream.Msg) error {
		raws, _, err := audit.Entries(m.Subject(), m.Data())
		sizes = append(sizes, len(raws))
		for _, raw := range raws {
			seen[audit.IDOf(raw)]++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sizes) != "[1 256 43]" {
		t.Fatalf("stored messages of %v entries, want [1 256 43]", sizes)
	}
	for i := range 300 {
		if n := seen[fmt.Sprintf("ev-%03d", i)]; n != 1 {
			t.Errorf("entry ev-%03d stored %d times, want once", i, n)
		}
	}
	signer := newSigner(t)
	cfg := auditlog.CheckpointConfig{JS: js, Signer: signer, Every: 100, Interval: time.Nanosecond}
	for {
		n, err := auditlog.Checkpoint(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n != 257 && n != 43 {
			t.Fatalf("a checkpoint of %d entries: want whole messages (257, then 43)", n)
		}
	}
	var bundle bytes.Buffer
	if err := auditlog.Export(ctx, js, &bundle, audit.Header{Keys: signer.Keys().JWKS()}, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, rep, err := audit.Verify(ctx, &bundle, signer.Keys())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Entries != 300 || rep.Signed != 300 || rep.Checkpoints != 2 {
		t.Fatalf("report %+v: want 300 entries signed by 2 checkpoints in one chain", rep)
	}
}

func lastSeq(ctx context.Context, t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	_, last, err := auditlog.State(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func newSigner(t *testing.T) *receipt.Signer {
	t.Helper()
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

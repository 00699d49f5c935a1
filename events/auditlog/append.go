package auditlog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
)

// Append stores e in the log, de-duplicated by msgID within the stream's
// duplicate window.
func Append(ctx context.Context, js jetstream.JetStream, e *audit.Entry, msgID string) (uint64, error) {
	data, err := e.Encode()
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: e.Subject(), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(audit.Stream))
	if err != nil {
		return 0, fmt.Errorf("audit: append %s of %s: %w", e.Change, e.ID(), err)
	}
	return ack.Sequence, nil
}

// Appender appends entries by group commit: while one write is on its way
// to the store, the entries that arrive queue up, and the next write takes
// them all (up to audit.MaxBatch) as one batch, so the log costs one
// synced write per batch instead of one per entry when appends come
// faster than the store syncs. Every write is a batch on
// audit.SubjectBatch, one subject for the whole log (an entry that arrives
// alone is a batch of one), so the store keeps no subject per approval for
// the log. Append returns once the entry is stored.
//
// A batch of one is de-duplicated by its entry's id, as Append does; a
// larger batch by the ids of its entries, so a batch sent again is stored
// once, but an entry of it is not de-duplicated against the same entry
// appended again later (a change handled again after a crash), which then
// appears twice in the log, each time chained.
type Appender struct {
	js jetstream.JetStream
	// Timeout bounds one write (default 10 s).
	Timeout time.Duration

	mu      sync.Mutex
	queue   []*queued
	writing bool
}

type queued struct {
	data  []byte
	msgID string
	done  chan error
}

// maxBatchBytes bounds a batch's size, far below the server's max payload.
const maxBatchBytes = 256 << 10

// NewAppender returns an Appender that writes with js.
func NewAppender(js jetstream.JetStream) *Appender {
	return &Appender{js: js, Timeout: 10 * time.Second}
}

// Append stores e, de-duplicated by msgID when it is written alone, and
// returns once it is stored, or with ctx's error (the entry may still be
// stored).
func (a *Appender) Append(ctx context.Context, e *audit.Entry, msgID string) error {
	data, err := e.Encode()
	if err != nil {
		return err
	}
	q := &queued{data: data, msgID: msgID, done: make(chan error, 1)}
	a.mu.Lock()
	a.queue = append(a.queue, q)
	start := !a.writing
	a.writing = true
	a.mu.Unlock()
	if start {
		go a.run()
	}
	select {
	case err := <-q.done:
		if err != nil {
			return fmt.Errorf("audit: append %s of %s: %w", e.Change, e.ID(), err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Queued is how many entries wait for a write to start.
func (a *Appender) Queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// run writes what is queued, a batch at a time, until the queue is empty.
func (a *Appender) run() {
	for {
		a.mu.Lock()
		n, size := 0, 0
		for n < len(a.queue) && n < audit.MaxBatch && (n == 0 || size+len(a.queue[n].data) <= maxBatchBytes) {
			size += len(a.queue[n].data)
			n++
		}
		batch := a.queue[:n:n]
		a.queue = a.queue[n:]
		if n == 0 {
			a.writing = false
			a.queue = nil
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		err := a.write(batch)
		for _, q := range batch {
			q.done <- err
		}
	}
}

// write stores batch as one audit.Batch.
func (a *Appender) write(batch []*queued) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	defer cancel()
	entries := make([][]byte, len(batch))
	ids := sha256.New()
	for i, q := range batch {
		entries[i] = q.data
		ids.Write([]byte(q.msgID))
		ids.Write([]byte{'\n'})
	}
	id := batch[0].msgID
	if len(batch) > 1 {
		id = "audit-batch:" + hex.EncodeToString(ids.Sum(nil)[:16])
	}
	msg := &nats.Msg{Subject: audit.SubjectBatch, Data: audit.EncodeBatch(entries), Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	_, err := a.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(audit.Stream))
	return err
}

package events

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ForEachMsg calls fn with every message of st on subjects matching filter
// (wildcards allowed), oldest first, until fn returns false. Each message
// is one message get: "the next message at or after this sequence on
// filter", which the server answers from its subject index. No consumer is
// created, so reads at any rate never meet the server's limit on consumers
// per stream, and an approval with nothing stored costs one request. On a
// stream without direct gets (the event stream) the stream's leader
// answers, so every acknowledged message is seen.
func ForEachMsg(ctx context.Context, st jetstream.Stream, filter string, fn func(*jetstream.RawStreamMsg) bool) error {
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(m) {
			return nil
		}
		seq = m.Sequence + 1
	}
}

// StreamHandle looks a stream up once and keeps the handle; a failed
// lookup is tried again on the next call.
type StreamHandle struct {
	JS   jetstream.JetStream
	Name string

	mu sync.Mutex
	st jetstream.Stream
}

// Get returns the stream's handle.
func (h *StreamHandle) Get(ctx context.Context) (jetstream.Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st != nil {
		return h.st, nil
	}
	st, err := h.JS.Stream(ctx, h.Name)
	if err != nil {
		return nil, err
	}
	h.st = st
	return st, nil
}

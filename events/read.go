package events

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ForEachMsg calls fn with every message of st on subject, oldest first,
// until fn returns false. Each message is one message get: "the next
// message at or after this sequence on subject". No consumer is created,
// so reads at any rate never meet the server's limit on consumers per
// stream, and a subject with nothing stored costs one request. On a stream
// without direct gets (the event stream) the stream's leader answers, so
// every acknowledged message is seen.
//
// Give literal subjects: the server finds the next message of a literal
// subject from its per-subject index at a cost that does not grow with the
// stream, while a wildcard makes it scan (measured: 0.5 ms for three
// receipts among 600 messages, 6.9 ms among 60,000).
func ForEachMsg(ctx context.Context, st jetstream.Stream, subject string, fn func(*jetstream.RawStreamMsg) bool) error {
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
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

// ReadSubjects reads every message of st on the literal subjects, at most
// limit in all, and returns them in stream order; truncated reports that
// more were stored.
func ReadSubjects(ctx context.Context, st jetstream.Stream, subjects []string, limit int) (msgs []*jetstream.RawStreamMsg, truncated bool, err error) {
	for _, subj := range subjects {
		err := ForEachMsg(ctx, st, subj, func(m *jetstream.RawStreamMsg) bool {
			if len(msgs) == limit {
				truncated = true
				return false
			}
			msgs = append(msgs, m)
			return true
		})
		if err != nil {
			return nil, false, err
		}
		if truncated {
			break
		}
	}
	slices.SortFunc(msgs, func(a, b *jetstream.RawStreamMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
	return msgs, truncated, nil
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

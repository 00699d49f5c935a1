package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Readable is what NewestReadable found under a key.
type Readable struct {
	// Value is the newest value the reader takes (nil: none), written at
	// Revision.
	Value    []byte
	Revision uint64
	// Last is the key's last revision, which a write over the key must
	// expect: Revision, or that of a later value the reader refused.
	Last uint64
}

// NewestReadable reads key of kv (kv's bucket, named bucket) for readers
// whose values only one role writes: the newest value accept takes, and
// the key's last revision. The contract's buckets keep one value a key and
// refuse such an answer once the key holds the writer's value, so what it
// skips there is an answer stored on a key that held nothing yet; on a
// bucket an earlier release provisioned, which kept a key's history, it
// also finds the writer's value under later answers.
// accept tells the writer's values from others (contracts.Owned), not
// readable ones from unreadable: a value the writer wrote in a version
// the reader cannot read must stop the reader, not let an older one stand.
//
// A value accept refuses is one the NATS server stored there as its answer
// to someone's JetStream request whose reply subject named the key (any
// credential that may send a JetStream request can have it do so); what
// the writer wrote before it is the key's value still. So the reader keeps
// that, and the next write, expecting Last, replaces what was stored. Only
// then are the key's earlier messages read (one message get each, at most
// the bucket's history). A deletion or purge after a value ends it: the
// key has no value then. ErrKeyNotFound is answered for a key with no
// message at all.
func NewestReadable(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, key string, accept func([]byte) bool) (Readable, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Readable{}, err
	}
	if err != nil {
		return Readable{}, fmt.Errorf("events: read %s in %s: %w", key, bucket, err)
	}
	if accept(e.Value()) {
		return Readable{Value: e.Value(), Revision: e.Revision(), Last: e.Revision()}, nil
	}
	out := Readable{Last: e.Revision()}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return Readable{}, fmt.Errorf("events: read %s in %s: %w", key, bucket, err)
	}
	subject := "$KV." + bucket + "." + key
	for seq := uint64(1); seq < out.Last; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return Readable{}, fmt.Errorf("events: read the history of %s in %s: %w", key, bucket, err)
		}
		if m.Sequence >= out.Last {
			break
		}
		switch op := m.Header.Get(kvOperationHeader); {
		case op == kvOperationDelete || op == kvOperationPurge:
			out.Value, out.Revision = nil, 0
		case accept(m.Data):
			out.Value, out.Revision = m.Data, m.Sequence
		}
		seq = m.Sequence + 1
	}
	return out, nil
}

// The header a bucket's deletions and purges carry (the KV convention).
const (
	kvOperationHeader = "KV-Operation"
	kvOperationDelete = "DEL"
	kvOperationPurge  = "PURGE"
)

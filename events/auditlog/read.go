package auditlog

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
)

// readInactive is how long a reader's consumer outlives its last fetch.
const readInactive = 10 * time.Second

// State is where the log stands: its first and last stream sequences.
func State(ctx context.Context, js jetstream.JetStream) (first, last uint64, err error) {
	st, err := js.Stream(ctx, audit.Stream)
	if err != nil {
		return 0, 0, err
	}
	s := st.CachedInfo().State
	return s.FirstSeq, s.LastSeq, nil
}

// errStop ends a read early without an error.
var errStop = errors.New("stop")

// Read calls fn with every message of the log from sequence start to last,
// in order. It reads with a plain ephemeral consumer that acknowledges
// nothing and lapses by itself a few seconds after its last fetch.
func Read(ctx context.Context, js jetstream.JetStream, start, last uint64, fn func(seq uint64, m jetstream.Msg) error) error {
	if start == 0 {
		start = 1
	}
	if last < start {
		return nil
	}
	cons, err := js.CreateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		InactiveThreshold: readInactive, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
	})
	if err != nil {
		return err
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			if seq > last {
				return nil
			}
			if err := fn(seq, m); err != nil {
				if errors.Is(err, errStop) {
					return nil
				}
				return err
			}
			if seq == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

package auditlog

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
)

// Export writes the bundle of the log's entries in [since, until] (a zero
// time leaves that end open), under header h, to w as it reads the stream.
func Export(ctx context.Context, js jetstream.JetStream, w io.Writer, h audit.Header, since, until time.Time) error {
	first, end, err := State(ctx, js)
	if err != nil {
		return err
	}
	bw, err := audit.NewWriter(w, h)
	if err != nil {
		return err
	}
	x := audit.NewExporter(bw, since, until, first)
	err = Read(ctx, js, first, end, func(seq uint64, m jetstream.Msg) error {
		if m.Subject() == audit.SubjectCheckpoint {
			return x.Checkpoint(string(m.Data()))
		}
		entries, first, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			// Written as it is, for the verifier to judge.
			x.Entry(audit.Pos{Seq: seq}, m.Data())
			return nil
		}
		for i, raw := range entries {
			x.Entry(posOf(seq, first, i), raw)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return x.Close()
}

package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/audit/ocsf"
)

// Product is how Countersign names itself in OCSF events.
var Product = ocsf.Product{Name: "Countersign", VendorName: "Countersign"}

// Entries calls fn with every entry of the log in [since, until] (by the
// entry's time; a zero time leaves that end open), in the log's order.
// An entry that does not decode is skipped: the native bundle keeps it for
// the verifier to judge.
func Entries(ctx context.Context, js jetstream.JetStream, since, until time.Time, fn func(at audit.Pos, e *audit.Entry) error) error {
	first, end, err := State(ctx, js)
	if err != nil {
		return err
	}
	return Read(ctx, js, first, end, func(seq uint64, m jetstream.Msg) error {
		entries, index, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			return nil
		}
		for i, raw := range entries {
			var e audit.Entry
			if json.Unmarshal(raw, &e) != nil {
				continue
			}
			if !since.IsZero() && e.At.Before(since) || !until.IsZero() && e.At.After(until) {
				continue
			}
			if err := fn(posOf(seq, index, i), &e); err != nil {
				return err
			}
		}
		return nil
	})
}

// posOf is the place of the i-th entry (from 0) of the message stored at
// seq whose first entry has index first (audit.Entries).
func posOf(seq uint64, first, i int) audit.Pos {
	if first == 0 {
		return audit.Pos{Seq: seq}
	}
	return audit.Pos{Seq: seq, Index: first + i}
}

// ExportOCSF writes the OCSF event (JSON Lines) of every entry in [since,
// until] that keep accepts (nil keeps all), as it reads the stream.
func ExportOCSF(ctx context.Context, js jetstream.JetStream, w io.Writer, since, until time.Time, keep func(*audit.Entry) bool) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err := Entries(ctx, js, since, until, func(at audit.Pos, e *audit.Entry) error {
		if keep != nil && !keep(e) {
			return nil
		}
		if err := enc.Encode(ocsf.FromEntry(e, at, Product)); err != nil {
			return err
		}
		if n++; n%256 == 0 {
			return bw.Flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
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
func Entries(ctx context.Context, js jetstream.JetStream, since, until time.Time, fn func(seq uint64, e *audit.Entry) error) error {
	first, end, err := State(ctx, js)
	if err != nil {
		return err
	}
	return Read(ctx, js, first, end, func(seq uint64, m jetstream.Msg) error {
		if !strings.HasPrefix(m.Subject(), audit.SubjectEntryPrefix) {
			return nil
		}
		var e audit.Entry
		if json.Unmarshal(m.Data(), &e) != nil {
			return nil
		}
		if !since.IsZero() && e.At.Before(since) || !until.IsZero() && e.At.After(until) {
			return nil
		}
		return fn(seq, &e)
	})
}

// ExportOCSF writes the OCSF event (JSON Lines) of every entry in [since,
// until] that keep accepts (nil keeps all), as it reads the stream.
func ExportOCSF(ctx context.Context, js jetstream.JetStream, w io.Writer, since, until time.Time, keep func(*audit.Entry) bool) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err := Entries(ctx, js, since, until, func(seq uint64, e *audit.Entry) error {
		if keep != nil && !keep(e) {
			return nil
		}
		if err := enc.Encode(ocsf.FromEntry(e, seq, Product)); err != nil {
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

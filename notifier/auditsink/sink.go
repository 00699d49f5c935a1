package auditsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/audit/ocsf"
	"github.com/countersign/countersign/events"
)

// Product is how Countersign names itself in the OCSF events it sends.
var Product = ocsf.Product{Name: "Countersign", VendorName: "Countersign"}

// Runner delivers the audit log to its sinks.
type Runner struct {
	cfg Config
}

// New validates cfg and returns its Runner.
func New(cfg Config) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.JS == nil {
		return nil, errors.New("auditsink: Config.JS is required")
	}
	client := *cfg.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.Client = &client
	return &Runner{cfg: cfg}, nil
}

// Durables are the names of the sinks' durable consumers on HITL_AUDIT.
func (r *Runner) Durables() []string {
	var out []string
	for _, s := range r.cfg.Sinks {
		out = append(out, DurablePrefix+s.Name)
	}
	return out
}

// Run delivers every entry to every sink until ctx ends: each sink has its
// own durable consumer, so one sink's trouble holds back no other sink and
// nothing that appends to the log.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.cfg.Sinks))
	for i := range r.cfg.Sinks {
		d, err := r.deliverer(&r.cfg.Sinks[i])
		if err != nil {
			return fmt.Errorf("auditsink: %s: %w", r.cfg.Sinks[i].Name, err)
		}
		wg.Go(func() {
			defer d.close()
			errs[i] = r.consume(ctx, &r.cfg.Sinks[i], d)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deliverer sends one entry's body to a sink; close releases what it holds.
type deliverer interface {
	deliver(ctx context.Context, at audit.Pos, e *audit.Entry, body []byte) error
	close()
}

func (r *Runner) deliverer(s *Sink) (deliverer, error) {
	if s.URL != "" {
		return newHTTPSink(s, r.cfg.Client, r.cfg.Now)
	}
	return newSyslogSink(s, r.cfg.Now)
}

// consume runs the sink's durable consumer: an entry is acknowledged once
// the sink accepted it, retried with backoff while the sink fails, and
// dead-lettered when it refuses it or after Attempts deliveries.
func (r *Runner) consume(ctx context.Context, s *Sink, d deliverer) error {
	log := r.cfg.Logger.With("sink", s.Name)
	return events.Consume(ctx, r.cfg.JS, events.ConsumerConfig{
		Stream: audit.Stream, Durable: DurablePrefix + s.Name,
		FilterSubjects: []string{audit.SubjectEntryPrefix + ">", audit.SubjectBatch},
		MaxDeliver:     s.Attempts, AckWait: s.Timeout + s.MaxBackoff, Concurrency: 1, MaxAckPending: 64,
		Backoff: s.Backoff, MaxBackoff: s.MaxBackoff, Logger: log, OnDeadLetter: r.cfg.OnDeadLetter,
	}, func(ctx context.Context, m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		entries, first, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			return events.Poison(fmt.Errorf("message %d: %w", md.Sequence.Stream, err))
		}
		// The entries of a batch go out in order; a failure sends the
		// batch again, and a sink tells the repeats by their ids.
		for i, raw := range entries {
			at := audit.Pos{Seq: md.Sequence.Stream}
			if first != 0 {
				at.Index = first + i
			}
			if err := r.deliverEntry(ctx, s, d, at, raw); err != nil {
				log.Warn("audit sink delivery failed", "entry", at.String(), "attempt", md.NumDelivered, "err", err)
				return err
			}
		}
		return nil
	})
}

// deliverEntry sends the entry at at to the sink when the sink takes its
// tenant.
func (r *Runner) deliverEntry(ctx context.Context, s *Sink, d deliverer, at audit.Pos, raw []byte) error {
	var e audit.Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return events.Poison(fmt.Errorf("entry %s does not decode: %w", at, err))
	}
	if !s.takes(e.Tenant) {
		return nil
	}
	body, err := encode(s.Format, &e, at, raw)
	if err != nil {
		return events.Poison(err)
	}
	return d.deliver(ctx, at, &e, body)
}

// encode is what a sink of format receives for the entry stored at seq.
func encode(format string, e *audit.Entry, at audit.Pos, raw []byte) ([]byte, error) {
	if format == FormatNative {
		return json.Marshal(audit.Line{Seq: at.Seq, Index: at.Index, Entry: raw})
	}
	ev := ocsf.FromEntry(e, at, Product)
	return ev.Marshal()
}

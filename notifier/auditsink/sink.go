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
	deliver(ctx context.Context, seq uint64, e *audit.Entry, body []byte) error
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
		FilterSubjects: []string{audit.SubjectEntryPrefix + ">"},
		MaxDeliver:     s.Attempts, AckWait: s.Timeout + s.MaxBackoff, Concurrency: 1, MaxAckPending: 64,
		Backoff: s.Backoff, MaxBackoff: s.MaxBackoff, Logger: log, OnDeadLetter: r.cfg.OnDeadLetter,
	}, func(ctx context.Context, m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		var e audit.Entry
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			return events.Poison(fmt.Errorf("entry %d does not decode: %w", md.Sequence.Stream, err))
		}
		if !s.takes(e.Tenant) {
			return nil
		}
		body, err := encode(s.Format, &e, md.Sequence.Stream, m.Data())
		if err != nil {
			return events.Poison(err)
		}
		if err := d.deliver(ctx, md.Sequence.Stream, &e, body); err != nil {
			log.Warn("audit sink delivery failed", "seq", md.Sequence.Stream, "attempt", md.NumDelivered, "err", err)
			return err
		}
		return nil
	})
}

// encode is what a sink of format receives for the entry stored at seq.
func encode(format string, e *audit.Entry, seq uint64, raw []byte) ([]byte, error) {
	if format == FormatNative {
		return json.Marshal(audit.Line{Seq: seq, Entry: raw})
	}
	ev := ocsf.FromEntry(e, seq, Product)
	return ev.Marshal()
}

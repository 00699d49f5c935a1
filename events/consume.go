package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// Headers added to a dead-lettered copy of a message.
const (
	HeaderDeadLetterReason   = "Countersign-Dead-Letter-Reason"
	HeaderDeadLetterSubject  = "Countersign-Dead-Letter-Subject"
	HeaderDeadLetterStream   = "Countersign-Dead-Letter-Stream"
	HeaderDeadLetterSeq      = "Countersign-Dead-Letter-Stream-Seq"
	HeaderDeadLetterConsumer = "Countersign-Dead-Letter-Consumer"
	// HeaderDeadLetterTruncated, on a dead-lettered copy cut short to fit
	// the max payload, is the original body's length in bytes.
	HeaderDeadLetterTruncated = "Countersign-Dead-Letter-Truncated"
)

// deadLetterHeaderRoom is what a dead-lettered copy keeps for its headers
// (the reason is at most 1 KiB).
const deadLetterHeaderRoom = 4 << 10

// retryError asks the loop to redeliver the message after a delay.
type retryError struct {
	after time.Duration
	err   error
}

func (e *retryError) Error() string { return fmt.Sprintf("retry in %s: %v", e.after, e.err) }
func (e *retryError) Unwrap() error { return e.err }

// Retry makes the loop Nak the message with delay after; it is redelivered
// until the consumer's MaxDeliver, then dead-lettered.
func Retry(after time.Duration, err error) error { return &retryError{after: after, err: err} }

// poisonError tells the loop the message can never be processed.
type poisonError struct{ err error }

func (e *poisonError) Error() string { return "poison message: " + e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// Poison makes the loop copy the message to the dead-letter subject and
// terminate it: it will not be redelivered.
func Poison(err error) error { return &poisonError{err: err} }

// IsPoison reports whether err was made by Poison.
func IsPoison(err error) bool {
	var p *poisonError
	return errors.As(err, &p)
}

// Disposition is what the consume loop does with a message after its
// handler returned: see Classify.
type Disposition int

const (
	// Ack: handled.
	Ack Disposition = iota
	// Detached: the handler handed the message on (ErrDetached).
	Detached
	// RetryAfter: Nak with the delay the handler asked for (Retry).
	RetryAfter
	// Transient: a failure that may pass (a timeout, no responders, a
	// compare-and-set conflict, a leader change): Nak with a growing,
	// bounded delay until MaxDeliver, then dead-letter.
	Transient
	// Permanent: the message can never be handled (it cannot be decoded, it
	// breaks the contract, it does not fit the max payload, or the handler
	// said so with Poison): dead-letter and terminate it at once.
	Permanent
)

func (d Disposition) String() string {
	switch d {
	case Ack:
		return "ack"
	case Detached:
		return "detached"
	case RetryAfter:
		return "retry_after"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	}
	return "unknown"
}

// Classify says what the loop does after a handler returned err. Errors
// that can never succeed are permanent whatever wraps them: Poison, JSON
// decode errors, contract violations (*contracts.FieldError,
// contracts.ErrTooLarge), a message over the server's max payload
// (nats.ErrMaxPayload, or the stream's own limit). Retry asks for a delay.
// Anything else is treated as transient, with bounded retries.
func Classify(err error) Disposition {
	var (
		r     *retryError
		syn   *json.SyntaxError
		typ   *json.UnmarshalTypeError
		field *contracts.FieldError
		api   *jetstream.APIError
	)
	switch {
	case err == nil:
		return Ack
	case errors.Is(err, ErrDetached):
		return Detached
	case IsPoison(err),
		errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, contracts.ErrTooLarge),
		errors.As(err, &syn), errors.As(err, &typ), errors.As(err, &field),
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return Permanent
	case errors.As(err, &r):
		return RetryAfter
	}
	return Transient
}

// ErrDetached, returned by a Handler, says the handler handed the message
// to work that outlives the call (a slow delivery, say) and that this work
// will acknowledge, nak or terminate it. The loop does nothing more with the
// message and takes the next one; the consumer's MaxAckPending bounds how
// many detached messages are outstanding.
var ErrDetached = errors.New("events: message detached from the consume loop")

// Handler processes one message. nil acks it; an error made by Retry naks it
// with a delay; one made by Poison dead-letters and terminates it; any other
// error naks it with a growing delay until MaxDeliver, then dead-letters it.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// ConsumerConfig describes one durable consume loop.
type ConsumerConfig struct {
	Stream         string
	Durable        string
	FilterSubjects []string
	// MaxDeliver bounds deliveries of one message (default 20). The loop
	// dead-letters a message on its last delivery instead of handing it back.
	// The server-side consumer itself redelivers without limit, so a message
	// whose dead-letter copy could not be stored comes back and is tried again
	// rather than being stranded.
	MaxDeliver int
	// AckWait before an unacknowledged message is redelivered (default 30 s).
	AckWait time.Duration
	// Concurrency is how many messages are handled at once (default 1).
	Concurrency int
	// MaxAckPending bounds the messages given out and not yet acknowledged
	// (default the larger of 1000 and 4 × Concurrency); with detached
	// handlers it bounds the work outstanding.
	MaxAckPending int
	// Backoff is the first Nak delay for plain errors; it doubles per
	// delivery up to MaxBackoff (defaults 250 ms and 30 s).
	Backoff, MaxBackoff time.Duration
	Logger              *slog.Logger
	// OnDeadLetter is called once a message's dead-letter copy is stored, just
	// before the message is terminated (for metrics).
	OnDeadLetter func(stream, reason string)
}

func (c *ConsumerConfig) setDefaults() {
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 20
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = max(1000, c.Concurrency*4)
	}
	if c.Backoff == 0 {
		c.Backoff = 250 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *ConsumerConfig) validate() error {
	var errs []error
	if c.Stream == "" {
		errs = append(errs, errors.New("events: ConsumerConfig.Stream is required"))
	}
	if c.Durable == "" {
		errs = append(errs, errors.New("events: ConsumerConfig.Durable is required"))
	}
	if c.MaxDeliver < 2 {
		errs = append(errs, errors.New("events: ConsumerConfig.MaxDeliver must be at least 2"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("events: ConsumerConfig.Concurrency must be at least 1"))
	}
	return errors.Join(errs...)
}

// Consume creates (or updates) the durable consumer and handles its messages
// until ctx ends. Several processes may run the same durable: each message
// goes to one of them.
func Consume(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig, h Handler) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	cc := jetstream.ConsumerConfig{
		Durable:        cfg.Durable,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  cfg.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: cfg.FilterSubjects,
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return fmt.Errorf("events: consumer %s on %s: %w", cfg.Durable, cfg.Stream, err)
	}
	l := &loop{js: js, cfg: cfg, h: h, sem: make(chan struct{}, cfg.Concurrency)}
	cctx, err := cons.Consume(func(m jetstream.Msg) {
		l.sem <- struct{}{}
		l.wg.Add(1)
		go func() {
			defer func() { <-l.sem; l.wg.Done() }()
			l.handle(ctx, m)
		}()
	}, jetstream.PullMaxMessages(max(64, cfg.Concurrency*2)), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil {
			cfg.Logger.Debug("consume", "durable", cfg.Durable, "err", err)
		}
	}))
	if err != nil {
		return fmt.Errorf("events: consume %s: %w", cfg.Durable, err)
	}
	<-ctx.Done()
	cctx.Drain()
	<-cctx.Closed()
	l.wg.Wait()
	return nil
}

type loop struct {
	js  jetstream.JetStream
	cfg ConsumerConfig
	h   Handler
	sem chan struct{}
	wg  sync.WaitGroup
}

func (l *loop) handle(ctx context.Context, m jetstream.Msg) {
	log := l.cfg.Logger
	var delivered uint64 = 1
	if md, err := m.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	err := l.safeHandle(ctx, m)
	d := Classify(err)
	switch d {
	case Detached:
		return
	case Ack:
		if aerr := m.Ack(); aerr != nil {
			log.Debug("ack", "subject", m.Subject(), "err", aerr)
		}
		return
	}
	if ctx.Err() != nil && d != Permanent {
		// Shutting down: let the server redeliver to another replica.
		_ = m.NakWithDelay(time.Second)
		return
	}
	last := delivered >= uint64(l.cfg.MaxDeliver)
	var r *retryError
	switch {
	case d == Permanent:
		reason := err.Error()
		if !IsPoison(err) {
			reason = Poison(err).Error()
		}
		l.deadLetter(ctx, m, reason)
	case last:
		l.deadLetter(ctx, m, fmt.Sprintf("gave up after %d deliveries: %v", delivered, err))
	case errors.As(err, &r):
		_ = m.NakWithDelay(r.after)
	default:
		log.Warn("handler failed; will retry", "subject", m.Subject(), "delivered", delivered, "err", err)
		_ = m.NakWithDelay(l.backoff(delivered))
	}
}

// safeHandle turns a handler panic into a poison error, so one bad message
// cannot crash the process.
func (l *loop) safeHandle(ctx context.Context, m jetstream.Msg) (err error) {
	// The message's trace goes on into whatever the handler publishes.
	if h := m.Headers(); h != nil {
		ctx = contracts.WithTraceparent(ctx, h.Get(HeaderTraceparent))
	}
	defer func() {
		if p := recover(); p != nil {
			err = Poison(fmt.Errorf("handler panic: %v", p))
		}
	}()
	return l.h(ctx, m)
}

func (l *loop) backoff(delivered uint64) time.Duration {
	d := l.cfg.Backoff
	for i := uint64(1); i < delivered && d < l.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, l.cfg.MaxBackoff)
}

// deadLetter copies m to hitl.deadletter.<stream> and terminates it. If the
// copy cannot be stored the message is handed back instead, so nothing is lost.
func (l *loop) deadLetter(ctx context.Context, m jetstream.Msg, reason string) {
	hdr := nats.Header{}
	for k, vs := range m.Headers() {
		if k == jetstream.MsgIDHeader {
			continue
		}
		hdr[k] = vs
	}
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	hdr.Set(HeaderDeadLetterReason, reason)
	hdr.Set(HeaderDeadLetterSubject, m.Subject())
	hdr.Set(HeaderDeadLetterStream, l.cfg.Stream)
	hdr.Set(HeaderDeadLetterConsumer, l.cfg.Durable)
	msgID := ""
	if md, err := m.Metadata(); err == nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		hdr.Set(HeaderDeadLetterSeq, seq)
		msgID = "dl:" + l.cfg.Stream + ":" + l.cfg.Durable + ":" + seq
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	data := m.Data()
	if max := l.js.Conn().MaxPayload() - deadLetterHeaderRoom; max > 0 && int64(len(data)) > max {
		// The copy of a message as large as a message may be, with the
		// dead-letter headers, would not fit: keep its start and say so.
		hdr.Set(HeaderDeadLetterTruncated, strconv.Itoa(len(data)))
		data = data[:max]
	}
	if _, err := PublishRaw(pctx, l.js, contracts.DeadLetterSubject(l.cfg.Stream), data, msgID, hdr); err != nil {
		l.cfg.Logger.Error("dead letter failed; message kept for redelivery", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(l.cfg.MaxBackoff)
		return
	}
	l.cfg.Logger.Warn("message dead-lettered", "subject", m.Subject(), "stream", l.cfg.Stream, "reason", reason)
	// Reported before the Term, so whoever sees the Term sees the count.
	if l.cfg.OnDeadLetter != nil {
		l.cfg.OnDeadLetter(l.cfg.Stream, reasonCode(reason))
	}
	if err := m.TermWithReason(truncate(reason, 200)); err != nil {
		l.cfg.Logger.Debug("term", "subject", m.Subject(), "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// reasonCode keeps metric label values bounded.
func reasonCode(reason string) string {
	switch {
	case len(reason) >= 6 && reason[:6] == "poison":
		return "poison"
	case len(reason) >= 8 && reason[:8] == "gave up ":
		return "max_deliver"
	default:
		return "other"
	}
}

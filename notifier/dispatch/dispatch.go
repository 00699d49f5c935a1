package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/tracing"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/audience"
)

// Durable consumer names of the notifier role.
const (
	DurableRequests = "notifier"
	DurableDecided  = "notifier-decided"
	DurableChanges  = "notifier-changes"
)

// RetryPolicy says how often and how far apart a notification is tried.
type RetryPolicy struct {
	// Attempts is the number of tries in all (default 6).
	Attempts int
	// Initial is the wait after the first failure (default 2 s); each
	// further wait is Multiplier times longer (default 4), at most Max
	// (default 10 min), with ±20% jitter.
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	// MaxRetryAfter caps a channel's Retry-After (default 1 h).
	MaxRetryAfter time.Duration
}

func (p *RetryPolicy) setDefaults() {
	if p.Attempts <= 0 {
		p.Attempts = 6
	}
	if p.Initial <= 0 {
		p.Initial = 2 * time.Second
	}
	if p.Multiplier < 1 {
		p.Multiplier = 4
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Minute
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = time.Hour
	}
}

// Wait is the pause after failed attempt n (from 1), before jitter.
func (p RetryPolicy) Wait(n int) time.Duration {
	d := float64(p.Initial)
	for i := 1; i < n; i++ {
		d *= p.Multiplier
		if d >= float64(p.Max) {
			return p.Max
		}
	}
	return min(time.Duration(d), p.Max)
}

// Config configures a Dispatcher.
type Config struct {
	// JS is a JetStream context of a NATS user with the notifier role.
	JS jetstream.JetStream
	// Channels are the configured channels, by their Name.
	Channels []notifier.Channel
	// People resolves approvers, groups and addresses; nil is an empty
	// directory.
	People People
	// Directory is the live directory the read rule judges people by (a
	// person is told of a request only when approval.CanRead lets them
	// read it). nil: the dispatcher follows it itself through JS.
	Directory *audience.Directory
	// Fanout bounds what one destination is sent under a flood.
	Fanout FanoutPolicy
	// Endpoints are the configured webhook endpoint names, for the bare
	// "webhook" route.
	Endpoints []string
	Retry     RetryPolicy
	// Concurrency is how many bus messages are routed at once (default 16).
	// Deliveries then go on in the background, every target on its own
	// goroutine, so a slow channel holds no routing slot.
	Concurrency int
	// MaxPending bounds the bus messages whose deliveries are under way
	// (default 20,000): while a channel is down, its retries keep messages
	// pending, and the others keep flowing until this many are outstanding.
	MaxPending int
	// AckWait of the durable consumers (default 30 s); a message in delivery
	// is kept alive with in-progress acks.
	AckWait time.Duration
	// DecidedWait is how long an outcome waits for deliveries of its request
	// that are still in flight before it updates the targets it knows
	// (default 30 s).
	DecidedWait  time.Duration
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	OnDeadLetter func(stream, reason string)
	Now          func() time.Time
}

// Dispatcher is the notifier role. Run it with Run.
type Dispatcher struct {
	cfg      Config
	log      *slog.Logger
	channels map[string]notifier.Channel
	kv       jetstream.KeyValue
	m        *metrics
	// work tracks deliveries detached from the consume loops.
	work sync.WaitGroup

	// events is the event stream, for reading receipts back.
	events *events.StreamHandle
	// channelNames are the channels whose receipts are read, sorted.
	channelNames []string
	// dir is the live directory; ownDir: the dispatcher follows it.
	dir    *audience.Directory
	ownDir bool
	fan    *fanout
	// decidedSeen are the approvals whose time to decision was counted.
	decidedMu   sync.Mutex
	decidedSeen map[string]bool
}

// New validates cfg and opens the approvals bucket.
func New(ctx context.Context, cfg Config) (*Dispatcher, error) {
	if cfg.JS == nil {
		return nil, errors.New("dispatch: Config.JS is required")
	}
	cfg.Retry.setDefaults()
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 20000
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.DecidedWait <= 0 {
		cfg.DecidedWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.People == nil {
		cfg.People = noPeople{}
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Logger, channels: map[string]notifier.Channel{},
		events: &events.StreamHandle{JS: cfg.JS, Name: contracts.StreamEvents},
		dir:    cfg.Directory, fan: newFanout(cfg.Fanout), decidedSeen: map[string]bool{}}
	if d.dir == nil {
		d.dir, d.ownDir = audience.New(cfg.JS, cfg.Logger.With("part", "directory")), true
	}
	for _, ch := range cfg.Channels {
		name := ch.Name()
		if !contracts.ValidChannelName(name) {
			return nil, fmt.Errorf("dispatch: channel name %q is not a subject token", name)
		}
		if _, dup := d.channels[name]; dup {
			return nil, fmt.Errorf("dispatch: channel %q configured twice", name)
		}
		d.channels[name] = ch
	}
	// Receipts are read on the built-in channels (a route to one that is
	// not configured leaves a failed receipt there) and on every configured one.
	d.channelNames = slices.Collect(maps.Keys(d.channels))
	for _, name := range notifier.DeliveringChannels {
		if _, ok := d.channels[name]; !ok {
			d.channelNames = append(d.channelNames, name)
		}
	}
	slices.Sort(d.channelNames)
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("dispatch: open bucket %s: %w", contracts.BucketApprovals, err)
	}
	d.kv = kv
	if d.m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return d, nil
}

// Run consumes requests and outcomes until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	run := func(cc events.ConsumerConfig, h events.Handler) {
		defer wg.Done()
		cc.Concurrency, cc.AckWait, cc.Logger, cc.OnDeadLetter = d.cfg.Concurrency, d.cfg.AckWait, d.log, d.cfg.OnDeadLetter
		cc.MaxAckPending = d.cfg.MaxPending
		if err := events.Consume(ctx, d.cfg.JS, cc, h); err != nil {
			errc <- err
		}
	}
	if d.ownDir {
		dctx, stop := context.WithCancel(ctx)
		defer stop()
		go d.dir.Run(dctx)
	}
	wg.Add(3)
	go run(events.ConsumerConfig{
		Stream: contracts.StreamRequests, Durable: DurableRequests,
		FilterSubjects: []string{contracts.SubjectToolRequestedPrefix + ">", contracts.SubjectInputRequestedPrefix + ">"},
		// A request waits with Retry for the arbiter's record (recordWait);
		// give it room for an arbiter that is restarting.
		MaxDeliver: 1000,
	}, d.handleRequest)
	go run(events.ConsumerConfig{
		Stream: contracts.StreamEvents, Durable: DurableDecided,
		FilterSubjects: []string{contracts.SubjectDecidedPrefix + ">"},
		// An outcome waits for in-flight deliveries with Retry; give it room.
		MaxDeliver: 1000,
	}, d.handleDecided)
	go run(events.ConsumerConfig{
		Stream: contracts.StreamEvents, Durable: DurableChanges,
		FilterSubjects: []string{contracts.SubjectChangedPrefix + ">"},
	}, d.handleChange)
	wg.Wait()
	d.work.Wait() // detached deliveries end with ctx and hand their messages back
	close(errc)
	return <-errc
}

// detach finishes msg in the background: keeps it alive while work runs,
// then acknowledges it, or hands it back for another try when work fails
// (again (the rest of a wait, say) says when).
func (d *Dispatcher) detach(ctx context.Context, msg jetstream.Msg, work func() (again time.Duration, err error)) error {
	d.work.Add(1)
	go func() {
		defer d.work.Done()
		stop := d.keepAlive(msg)
		again, err := work()
		stop()
		switch {
		case err == nil && again == 0:
			_ = msg.Ack()
		case ctx.Err() != nil:
			_ = msg.NakWithDelay(time.Second) // shutting down: another replica takes over
		default:
			if err != nil {
				d.log.Warn("notifications incomplete; the message will be redelivered", "subject", msg.Subject(), "err", err)
				again = max(again, 5*time.Second)
			}
			_ = msg.NakWithDelay(again)
		}
	}()
	return events.ErrDetached
}

// keepAlive tells the server the message is being worked on, every third
// of the ack wait, until the returned stop is called.
func (d *Dispatcher) keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	t := time.NewTicker(max(d.cfg.AckWait/3, 10*time.Millisecond))
	go func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// recordWait is how long a request waits before it looks again for the
// record the arbiter makes of it.
const recordWait = 100 * time.Millisecond

func (d *Dispatcher) record(ctx context.Context, id string) (*contracts.Record, error) {
	e, err := d.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(id, e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("record %s: %w", id, err)
	}
	return &rec, nil
}

// handleRequest delivers a new request to every target of its rule.
func (d *Dispatcher) handleRequest(ctx context.Context, msg jetstream.Msg) error {
	var req contracts.ApprovalRequested
	if err := contracts.Decode(msg.Data(), &req); err != nil {
		return events.Poison(fmt.Errorf("decode request: %w", err))
	}
	if !contracts.ValidEventID(req.EventID) {
		return events.Poison(fmt.Errorf("request has an invalid event_id %q", req.EventID))
	}
	if err := approval.ValidateRequest(&req); err != nil {
		// The arbiter dead-letters it: no record, nothing to decide.
		d.log.Warn("invalid request; nobody is notified", "event_id", req.EventID, "err", err)
		return nil
	}
	rec, err := d.record(ctx, req.EventID)
	if err != nil {
		return err
	}
	if rec == nil {
		// The arbiter makes the snapshot and checks the request against
		// the policy: until it has, nobody is told, so a forged request
		// it refuses reaches no one.
		return events.Retry(recordWait, errors.New("the arbiter has not created the approval's record yet"))
	}
	if refusal, ok := contracts.RequestRefusal(rec.Outcome); ok {
		d.log.Warn("request refused by the arbiter; nobody is notified", "event_id", req.EventID, "refusal", refusal)
		return nil
	}
	decided := rec.Terminal()
	req = rec.Request // the arbiter's snapshot is the authority
	// Only those who may read the request are told of it.
	who, err := d.readers(ctx, rec)
	if err != nil {
		return err
	}
	targets, problems := d.routing(who, req.Quorum.Approvers, reached(&req, req.CreatedAt))
	if decided {
		// Decided before anyone was told: people need not be asked any
		// more (they get the outcome), but webhooks, which feed automation
		// and audit, still get every request event.
		targets = slices.DeleteFunc(targets, func(t notifier.Target) bool { return t.Channel != contracts.ChannelWebhook })
		problems = nil
		d.log.Debug("request decided before delivery; webhooks only", "event_id", req.EventID, "status", rec.Status)
	}
	if len(targets) == 0 && len(problems) == 0 {
		return nil
	}
	have, err := d.receipts(ctx, req.EventID)
	if err != nil {
		return err
	}
	var notes []notifier.Notification
	for _, t := range targets {
		notes = append(notes, notifier.Requested(req, t))
	}
	return d.detach(ctx, msg, func() (time.Duration, error) {
		return d.deliverAll(ctx, notes, problems, req, have)
	})
}

// deliverAll delivers every notification not yet settled by a receipt, each
// on its own goroutine, within the fan-out cap, and records the problems
// once. It returns an error when a delivery must be tried again by
// redelivering the bus message.
func (d *Dispatcher) deliverAll(ctx context.Context, notes []notifier.Notification, problems []Problem, req contracts.ApprovalRequested, have receiptSet) (again time.Duration, err error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range mergeProblems(problems) {
		n := notifier.Notification{Kind: notifier.KindRequested, Request: req,
			Target: notifier.Target{Channel: p.Channel, Address: p.Route}}
		if have.settled(n.IdempotencyKey()) {
			continue
		}
		result := "unroutable"
		if p.Unreadable {
			result = "unreadable"
		}
		d.log.Warn("notification route reaches nobody who may be told", "event_id", req.EventID, "route", p.Route, "reason", p.Reason)
		d.m.notifications.WithLabelValues(p.Channel, kindLabel(n.Kind), result).Inc()
		if err := d.publishReceipt(ctx, notifier.NewReceipt(n, "", fmt.Errorf("%w: %s", notifier.ErrPermanent, p.Reason), d.cfg.Now())); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range notes {
		if have.settled(n.IdempotencyKey()) {
			d.m.notifications.WithLabelValues(n.Target.Channel, kindLabel(n.Kind), "already_delivered").Inc()
			continue
		}
		ch, ok := d.channels[n.Target.Channel]
		if !ok {
			d.m.notifications.WithLabelValues(n.Target.Channel, kindLabel(n.Kind), "unconfigured").Inc()
			err := fmt.Errorf("%w: channel %s is not configured on this notifier", notifier.ErrPermanent, n.Target.Channel)
			if perr := d.publishReceipt(ctx, notifier.NewReceipt(n, "", err, d.cfg.Now())); perr != nil {
				errs = append(errs, perr)
			}
			continue
		}
		if capped(n.Target.Channel, n.Kind) {
			v, until := d.fan.admit(n.Target, d.cfg.Now())
			if v != send {
				if err := d.held(ctx, n, until); err != nil {
					errs = append(errs, err)
				}
				if v != summary {
					continue
				}
				n = notifier.Held(n.Request, n.Target, until)
				if have.settled(n.IdempotencyKey()) {
					continue
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.deliver(ctx, ch, n); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return d.laterOf(errs)
}

// heldNote is a notification its channel keeps until a later time (its
// person's quiet hours; notifier.HeldUntil).
type heldNote struct{ until time.Time }

func (h *heldNote) Error() string {
	return "held until " + h.until.UTC().Format(time.RFC3339)
}

// quietRecheck bounds how long a bus message with held notifications is
// handed back for: their holds are judged again at least this often.
const quietRecheck = 10 * time.Minute

// laterOf splits the errors of a fan-out into the failures, joined, and
// how long to hand the bus message back for the held notifications: until
// the earliest hold ends (at least a second, at most quietRecheck).
func (d *Dispatcher) laterOf(errs []error) (time.Duration, error) {
	var (
		failed  []error
		earlier time.Time
	)
	for _, err := range errs {
		var h *heldNote
		if !errors.As(err, &h) {
			failed = append(failed, err)
			continue
		}
		if earlier.IsZero() || h.until.Before(earlier) {
			earlier = h.until
		}
	}
	if earlier.IsZero() {
		return 0, errors.Join(failed...)
	}
	return min(max(earlier.Sub(d.cfg.Now()), time.Second), quietRecheck), errors.Join(failed...)
}

// held records that the fan-out cap kept n from its target: a failed
// receipt that says so (which also keeps the outcome from being sent there
// on its own), and the count.
func (d *Dispatcher) held(ctx context.Context, n notifier.Notification, until time.Time) error {
	d.m.held.WithLabelValues(n.Target.Channel).Inc()
	d.m.notifications.WithLabelValues(n.Target.Channel, kindLabel(n.Kind), "held").Inc()
	err := fmt.Errorf("%w: held by the fan-out cap (%d messages per destination every %s) until %s; the request waits in the inbox",
		notifier.ErrPermanent, d.fan.p.Max, d.fan.p.Window, until.UTC().Format(time.RFC3339))
	return d.publishReceipt(ctx, notifier.NewReceipt(n, "", err, d.cfg.Now()))
}

// mergeProblems joins the problems of one route into one, whose reason
// lists each: a route has one receipt.
func mergeProblems(problems []Problem) []Problem {
	var out []Problem
	at := map[string]int{}
	for _, p := range problems {
		k := p.Channel + "\x00" + p.Route
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, p)
			continue
		}
		out[i].Reason += "; " + p.Reason
		out[i].Unreadable = out[i].Unreadable && p.Unreadable
	}
	return out
}

// deliver tries n on ch until it is delivered, fails for good, or is no
// longer worth showing, and publishes the receipt.
func (d *Dispatcher) deliver(ctx context.Context, ch notifier.Channel, n notifier.Notification) (err error) {
	channel, kind := n.Target.Channel, kindLabel(n.Kind)
	ctx, span := startNotify(ctx, n)
	defer func() { endNotify(span, err) }()
	log := d.log.With("event_id", n.EventID(), "channel", channel, "target", n.Target.Address, "kind", n.Kind)
	for attempt := 1; ; attempt++ {
		start := time.Now()
		var (
			rc  notifier.Receipt
			err error
		)
		if n.Kind == notifier.KindDecided {
			rc, err = ch.Update(ctx, n)
		} else {
			rc, err = ch.Notify(ctx, n)
		}
		d.m.seconds.WithLabelValues(channel).Observe(time.Since(start).Seconds())
		if err == nil {
			d.m.attempts.WithLabelValues(channel, "ok").Inc()
			d.m.notifications.WithLabelValues(channel, kind, "delivered").Inc()
			log.Info("notification delivered", "attempt", attempt, "ref", rc.Ref)
			span.SetAttributes(tracing.AttrStatus.String("delivered"))
			return d.publishReceipt(ctx, notifier.NewReceipt(n, rc.Ref, nil, d.cfg.Now()))
		}
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: the bus message comes back
		}
		if until, ok := notifier.HeldUntilOf(err); ok {
			// Kept for later: no receipt, so that the bus message, handed
			// back until then, tells this target when it comes again.
			d.m.notifications.WithLabelValues(channel, kind, "quiet").Inc()
			log.Info("notification kept for the end of quiet hours", "until", until)
			span.SetAttributes(tracing.AttrStatus.String("held"))
			return &heldNote{until: until}
		}
		permanent := errors.Is(err, notifier.ErrPermanent)
		if permanent {
			d.m.attempts.WithLabelValues(channel, "permanent").Inc()
		} else {
			d.m.attempts.WithLabelValues(channel, "transient").Inc()
		}
		if permanent || attempt >= d.cfg.Retry.Attempts {
			d.m.notifications.WithLabelValues(channel, kind, "failed").Inc()
			log.Warn("notification failed", "attempt", attempt, "permanent", permanent, "err", err)
			span.SetAttributes(tracing.AttrStatus.String("failed"))
			rcpt := notifier.NewReceipt(n, "", err, d.cfg.Now())
			if perr := d.deadLetter(ctx, n, rcpt, attempt); perr != nil {
				return perr
			}
			return d.publishReceipt(ctx, rcpt)
		}
		wait := jitter(d.cfg.Retry.Wait(attempt))
		if ra, ok := notifier.RetryAfterOf(err); ok {
			wait = max(wait, min(ra, d.cfg.Retry.MaxRetryAfter))
		}
		log.Info("notification attempt failed; retrying", "attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if n.Kind != notifier.KindDecided {
			// A request decided meanwhile needs no more showing.
			if rec, err := d.record(ctx, n.EventID()); err == nil && rec != nil && rec.Terminal() {
				d.m.notifications.WithLabelValues(channel, kind, "obsolete").Inc()
				log.Info("request decided while retrying; notification dropped")
				span.SetAttributes(tracing.AttrStatus.String("obsolete"))
				return nil
			}
		}
	}
}

// startNotify starts the notify span of n, a child of the review that
// asked for the approval; what the channel sends carries this span's trace
// context (a webhook's traceparent header).
func startNotify(ctx context.Context, n notifier.Notification) (context.Context, trace.Span) {
	if !tracing.Active() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := tracing.Start(ctx, tracing.SpanNotify, n.Request.Traceparent, append(tracing.Request(&n.Request),
		tracing.AttrEventID.String(n.EventID()), tracing.AttrChannel.String(n.Target.Channel), tracing.AttrKind.String(n.Kind))...)
	if tp := tracing.Traceparent(span); tp != "" {
		ctx = contracts.WithTraceparent(ctx, tp)
	}
	return ctx, span
}

func endNotify(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func kindLabel(kind string) string {
	if strings.HasPrefix(kind, "reminder.") {
		return "reminder"
	}
	return kind
}

// publishReceipt stores a receipt, retrying briefly; the receipt is what
// keeps a redelivered request from being posted twice.
func (d *Dispatcher) publishReceipt(ctx context.Context, r notifier.Receipt) error {
	msgID := "receipt:" + r.IdempotencyKey + ":" + r.Status
	var err error
	for i := 0; i < 5; i++ {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err = events.Publish(pctx, d.cfg.JS, notifier.ReceiptSubject(r.Channel, r.EventID), r, msgID, nil)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-time.After(time.Duration(i+1) * 200 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("receipt for %s: %w", r.EventID, err)
		}
	}
	return fmt.Errorf("receipt for %s: %w", r.EventID, err)
}

// DeadLetter is the body of a notification's dead-letter copy.
type DeadLetter struct {
	Receipt  notifier.Receipt `json:"receipt"`
	Attempts int              `json:"attempts"`
}

func (d *Dispatcher) deadLetter(ctx context.Context, n notifier.Notification, r notifier.Receipt, attempts int) error {
	stream := contracts.StreamRequests
	if n.Kind == notifier.KindDecided {
		stream = contracts.StreamEvents
	}
	hdr := nats.Header{}
	hdr.Set(events.HeaderDeadLetterReason, notifier.Truncate("notification failed: "+r.Error, 1024))
	hdr.Set(events.HeaderDeadLetterSubject, notifier.ReceiptSubject(r.Channel, r.EventID))
	hdr.Set(events.HeaderDeadLetterStream, stream)
	hdr.Set(events.HeaderDeadLetterConsumer, DurableRequests)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := events.Publish(pctx, d.cfg.JS, contracts.DeadLetterSubject(stream), DeadLetter{Receipt: r, Attempts: attempts},
		"dl:notify:"+r.IdempotencyKey, hdr); err != nil {
		return fmt.Errorf("dead letter for %s: %w", r.EventID, err)
	}
	if d.cfg.OnDeadLetter != nil {
		d.cfg.OnDeadLetter(stream, "notification_failed")
	}
	return nil
}

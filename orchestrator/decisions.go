package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// DecisionPoolConfig configures a DecisionPool.
type DecisionPoolConfig struct {
	// JS is the worker's connection (the orchestrator role may run pools).
	JS jetstream.JetStream
	// Pool names the pool: every worker with the same name shares one
	// durable consumer, and each decision goes to one of them. 1 to 64
	// characters of a-z, 0-9, - and _.
	Pool string
	// Handle is called with each decision. The decision is acknowledged
	// when it returns nil; an error (or a worker that dies first) hands it
	// to a worker of the pool again, after a backoff.
	Handle func(ctx context.Context, d contracts.Decided) error
	// Concurrency is how many decisions this worker handles at once
	// (default 1).
	Concurrency int
	// AckWait is how long a worker may hold a decision before it is handed
	// to another (default 30 s): a handler that takes longer must finish
	// within it, or make its work idempotent.
	AckWait time.Duration
	// MinBackoff and MaxBackoff bound the pause before a failed decision is
	// handed out again (defaults 250 ms and 30 s; it doubles per delivery).
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

func (c *DecisionPoolConfig) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 250 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *DecisionPoolConfig) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("orchestrator: DecisionPoolConfig.JS is required"))
	}
	if !validPoolName(c.Pool) {
		errs = append(errs, fmt.Errorf("orchestrator: DecisionPoolConfig.Pool %q must be 1 to 64 characters of a-z, 0-9, - and _", c.Pool))
	}
	if c.Handle == nil {
		errs = append(errs, errors.New("orchestrator: DecisionPoolConfig.Handle is required"))
	}
	if c.Concurrency < 0 || c.AckWait < 0 || c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, errors.New("orchestrator: DecisionPoolConfig: Concurrency, AckWait and the backoffs must be positive, MinBackoff ≤ MaxBackoff"))
	}
	return errors.Join(errs...)
}

func validPoolName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// DecisionPoolDurable is the durable consumer name of pool.
func DecisionPoolDurable(pool string) string { return "decisions-" + pool }

// DecisionPool is this process's worker of a decision pool: every approval
// decided from the pool's creation on is handed to one worker of the pool,
// at least once, and acknowledged after its handler returns. It is how a
// fleet resumes suspended runs on any worker: a worker suspends a run (its
// state stored where every worker can read it) and returns; when a human
// decides, some worker of the pool gets the decision and resumes the run.
// A pool sees every decision: a handler picks its own by Decided.Agent and
// Decided.RunID, and acknowledges the rest by returning nil.
type DecisionPool struct {
	cfg  DecisionPoolConfig
	cons jetstream.Consumer
}

// NewDecisionPool joins (or creates) the pool: once it returns, every
// decision from then on reaches the pool.
func NewDecisionPool(ctx context.Context, cfg DecisionPoolConfig) (*DecisionPool, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cons, err := cfg.JS.CreateOrUpdateConsumer(ctx, contracts.StreamEvents, jetstream.ConsumerConfig{
		Durable:       DecisionPoolDurable(cfg.Pool),
		Description:   "Countersign decision pool " + cfg.Pool,
		FilterSubject: contracts.SubjectDecidedPrefix + ">",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: max(64, 4*cfg.Concurrency),
	})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: decision pool %s: %w", cfg.Pool, err)
	}
	return &DecisionPool{cfg: cfg, cons: cons}, nil
}

// Run hands decisions to the handler until ctx ends, then waits for the
// handlers that run.
func (p *DecisionPool) Run(ctx context.Context) error {
	cfg := p.cfg
	slots := make(chan struct{}, cfg.Concurrency)
	done := make(chan struct{})
	handle := func(m jetstream.Msg) {
		defer func() { <-slots }()
		var d contracts.Decided
		if err := contracts.Decode(m.Data(), &d); err != nil {
			// Not a decision this release can read: nothing any worker could do.
			cfg.Logger.Warn("decision pool: unreadable decided event dropped", "pool", cfg.Pool, "subject", m.Subject(), "err", err)
			_ = m.Term()
			return
		}
		if err := cfg.Handle(ctx, d); err != nil {
			delay := cfg.MinBackoff
			if md, err := m.Metadata(); err == nil {
				for i := uint64(1); i < md.NumDelivered && delay < cfg.MaxBackoff; i++ {
					delay *= 2
				}
			}
			delay = min(delay, cfg.MaxBackoff)
			cfg.Logger.Warn("decision pool: handler failed; the decision goes to the pool again", "pool", cfg.Pool,
				"event_id", d.EventID, "retry_in", delay, "err", err)
			_ = m.NakWithDelay(delay)
			return
		}
		_ = m.Ack()
	}
	cc, err := p.cons.Consume(func(m jetstream.Msg) {
		select {
		case slots <- struct{}{}:
		case <-done:
			return // stopping: the decision is handed out again
		}
		go handle(m)
	}, jetstream.PullMaxMessages(cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("orchestrator: decision pool %s: %w", cfg.Pool, err)
	}
	<-ctx.Done()
	close(done)
	cc.Stop()
	// The handlers that run finish (and acknowledge their decisions).
	for range cfg.Concurrency {
		slots <- struct{}{}
	}
	return nil
}

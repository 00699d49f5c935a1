package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unique"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Defaults of Config.
const (
	DefaultMaxPerScope = 10_000
	DefaultMaxTotal    = 500_000
)

// ErrInexact is a figure the store cannot give exactly: its window reaches
// back to facts dropped beyond a cap, or further than the store keeps.
var ErrInexact = errors.New("history: the window reaches past what is kept; the figure would not be exact")

// ErrCatchingUp is a figure asked for while the store is still reading the
// history recorded before it opened.
var ErrCatchingUp = errors.New("history: still reading the recorded history; the figure would not be exact")

// Config wires a Store.
type Config struct {
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Now is the clock facts are recorded and windows end by.
	Now func() time.Time
	// Horizon is how far back facts are kept (default and most
	// policy.MaxHistoryWindow): a window longer than that errors.
	Horizon time.Duration
	// MaxPerScope bounds the facts kept per agent, run and tenant;
	// MaxTotal all of them.
	MaxPerScope int
	MaxTotal    int
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Horizon == 0 {
		c.Horizon = policy.MaxHistoryWindow
	}
	if c.MaxPerScope == 0 {
		c.MaxPerScope = DefaultMaxPerScope
	}
	if c.MaxTotal == 0 {
		c.MaxTotal = DefaultMaxTotal
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("history: Config.JS is required"))
	}
	if c.Horizon < 0 || c.Horizon > policy.MaxHistoryWindow {
		errs = append(errs, fmt.Errorf("history: Config.Horizon must be between 0 and %s, got %s", policy.MaxHistoryWindow, c.Horizon))
	}
	if c.MaxPerScope < 0 || c.MaxTotal < 0 {
		errs = append(errs, errors.New("history: Config.MaxPerScope and Config.MaxTotal must be positive"))
	}
	return errors.Join(errs...)
}

// entry is one fact kept, with its stream sequence.
type entry struct {
	seq      uint64
	f        contracts.HistoryFact
	approved bool // a person approved it (a decided event)
}

// scopeKey names one scope: kind, the tenant, and the run id or agent
// ("" for the tenant's).
type scopeKey struct{ kind, tenant, name string }

// scopeList is the facts of one scope, by sequence, and through when
// facts within the horizon were dropped beyond a cap.
type scopeList struct {
	es      []*entry
	dropped time.Time
}

// Store is a bounded window of the history, kept current from the stream.
// It is safe for concurrent use.
type Store struct {
	cfg Config
	mu  sync.Mutex
	// consumed is the last stream sequence applied; moved is closed and
	// replaced whenever it moves.
	consumed uint64
	moved    chan struct{}
	// target is the last sequence of the stream when the store opened:
	// until consumed reaches it, the store is catching up.
	target  uint64
	entries []*entry // by sequence
	byID    map[string]*entry
	scopes  map[scopeKey]*scopeList
	// approvedIDs are the approvals of facts not yet seen, by when.
	approvedIDs map[string]time.Time
	// locks serialize the reviews of one scope within the process.
	locks  [64]sync.Mutex
	stream jetstream.Stream
	facts  jetstream.ConsumeContext
	dec    jetstream.ConsumeContext
}

// Open starts following the history (and the approvals) from Horizon ago.
// It returns at once: the facts recorded before it are applied in the
// background (a large history takes a while), and until they are, a review
// whose policy reads the history waits for them (Review) and a figure asked
// for outside a review errors (ErrCatchingUp). A review whose policy reads
// no history is recorded meanwhile as always. WaitCaughtUp waits for them.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, moved: make(chan struct{}), byID: map[string]*entry{}, scopes: map[scopeKey]*scopeList{},
		approvedIDs: map[string]time.Time{}}
	stream, err := cfg.JS.Stream(ctx, contracts.StreamHistory)
	if err != nil {
		return nil, fmt.Errorf("history: open stream %s: %w", contracts.StreamHistory, err)
	}
	s.stream = stream
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("history: stream %s: %w", contracts.StreamHistory, err)
	}
	if age := info.Config.MaxAge; age > 0 && age < s.cfg.Horizon {
		// A window longer than the stream keeps cannot be counted after
		// a restart: it errors instead.
		s.cfg.Horizon = age
	}
	from := cfg.Now().Add(-s.cfg.Horizon)
	s.target = info.State.LastSeq
	if info.State.LastTime.Before(from) {
		// Nothing recorded since the horizon: no fact will be delivered.
		s.consumed = info.State.LastSeq
	}
	if s.dec, err = s.follow(ctx, contracts.StreamEvents, contracts.SubjectDecidedPrefix+">", from, s.applyDecided); err != nil {
		return nil, err
	}
	if s.facts, err = s.follow(ctx, contracts.StreamHistory, contracts.SubjectHistoryPrefix+">", from, s.applyFact); err != nil {
		s.dec.Stop()
		return nil, err
	}
	return s, nil
}

// WaitCaughtUp returns once the facts recorded before the store opened are
// applied, or ctx ends.
func (s *Store) WaitCaughtUp(ctx context.Context) error { return s.waitFor(ctx, s.target) }

// caughtUpLocked reports whether the facts recorded before the store opened are
// applied. s.mu is held.
func (s *Store) caughtUpLocked() bool { return s.consumed >= s.target }

// follow reads stream's subjects from a time on with an ordered consumer.
func (s *Store) follow(ctx context.Context, stream, subject string, from time.Time,
	apply func(jetstream.Msg)) (jetstream.ConsumeContext, error) {
	cons, err := s.cfg.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
	})
	if err != nil {
		return nil, fmt.Errorf("history: follow %s: %w", stream, err)
	}
	cc, err := cons.Consume(apply)
	if err != nil {
		return nil, fmt.Errorf("history: follow %s: %w", stream, err)
	}
	return cc, nil
}

// Close stops following the streams.
func (s *Store) Close() error {
	if s.facts != nil {
		s.facts.Stop()
	}
	if s.dec != nil {
		s.dec.Stop()
	}
	return nil
}

// Consumed is the last sequence of HITL_HISTORY the store applied.
func (s *Store) Consumed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumed
}

// waitFor returns once the facts up to sequence seq are applied.
func (s *Store) waitFor(ctx context.Context, seq uint64) error {
	for {
		s.mu.Lock()
		done, moved := s.consumed >= seq, s.moved
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("history: catching up to %d: %w", seq, context.Cause(ctx))
		}
	}
}

// applyFact keeps one fact of the stream.
func (s *Store) applyFact(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	var f contracts.HistoryFact
	if err := json.Unmarshal(m.Data(), &f); err != nil || f.Spec != contracts.SpecHistoryFact {
		s.cfg.Logger.Warn("history: unreadable fact", "seq", md.Sequence.Stream, "error", err)
		f = contracts.HistoryFact{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if md.Sequence.Stream > s.consumed {
		s.consumed = md.Sequence.Stream
		close(s.moved)
		s.moved = make(chan struct{})
	}
	if f.Spec == "" || s.byID[f.ID] != nil {
		return
	}
	internFact(&f)
	e := &entry{seq: md.Sequence.Stream, f: f}
	if _, ok := s.approvedIDs[f.ID]; ok {
		e.approved = true
		delete(s.approvedIDs, f.ID)
	}
	s.entries = append(s.entries, e)
	s.byID[f.ID] = e
	for _, k := range keysOf(&f) {
		l := s.scopes[k]
		if l == nil {
			l = &scopeList{}
			s.scopes[k] = l
		}
		l.es = append(l.es, e)
		if len(l.es) > s.cfg.MaxPerScope {
			l.dropped = later(l.dropped, l.es[0].f.At)
			l.es = l.es[1:]
		}
	}
	s.evict()
}

// internFact shares the strings of f that repeat from one fact to the next
// (spec, tool, agent, tenant, verdict, fields): the store keeps one copy of
// each, not one per fact.
func internFact(f *contracts.HistoryFact) {
	in := func(str string) string {
		if str == "" {
			return ""
		}
		return unique.Make(str).Value()
	}
	f.Spec, f.Tool, f.Agent, f.Tenant, f.Verdict = in(f.Spec), in(f.Tool), in(f.Agent), in(f.Tenant), in(f.Verdict)
	for i := range f.Fields {
		f.Fields[i] = in(f.Fields[i])
	}
}

// applyDecided marks an approved call.
func (s *Store) applyDecided(m jetstream.Msg) {
	var d contracts.Decided
	if err := json.Unmarshal(m.Data(), &d); err != nil || d.Status != contracts.StatusApproved {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byID[d.EventID]; e != nil {
		e.approved = true
		close(s.moved)
		s.moved = make(chan struct{})
	} else if len(s.approvedIDs) < s.cfg.MaxTotal {
		s.approvedIDs[d.EventID] = d.DecidedAt
	}
}

// evict drops the facts older than the horizon, and the oldest beyond
// MaxTotal (marking their scopes). The caller holds mu.
func (s *Store) evict() {
	old := s.cfg.Now().Add(-s.cfg.Horizon)
	for len(s.entries) > 0 && (len(s.entries) > s.cfg.MaxTotal || s.entries[0].f.At.Before(old)) {
		e := s.entries[0]
		s.entries[0] = nil
		s.entries = s.entries[1:]
		delete(s.byID, e.f.ID)
		capped := !e.f.At.Before(old)
		for _, k := range keysOf(&e.f) {
			l := s.scopes[k]
			if l == nil {
				continue
			}
			if i := indexOf(l.es, e); i >= 0 {
				l.es = append(l.es[:i:i], l.es[i+1:]...)
			}
			if capped {
				l.dropped = later(l.dropped, e.f.At)
			}
			if len(l.es) == 0 && l.dropped.Before(old) {
				delete(s.scopes, k)
			}
		}
	}
	for id, at := range s.approvedIDs {
		if at.Before(old) {
			delete(s.approvedIDs, id)
		}
	}
}

func indexOf(es []*entry, e *entry) int {
	for i, x := range es {
		if x == e {
			return i
		}
	}
	return -1
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// keysOf are the scopes a fact belongs to.
func keysOf(f *contracts.HistoryFact) [3]scopeKey {
	return [3]scopeKey{
		{contracts.HistoryScopeAgent, f.Tenant, f.Agent},
		{contracts.HistoryScopeRun, f.Tenant, f.RunID},
		{contracts.HistoryScopeTenant, f.Tenant, ""},
	}
}

package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// GrantBook knows the standing grants of the fleet: one KV watch of the
// hitl_grants bucket per process (share it between gates through
// Config.Grants), indexed by tenant, agent and tool. The watch only finds
// candidates; a grant about to allow a call is read again from the bucket
// first, so a revocation the watch has not delivered yet still applies.
type GrantBook struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu     sync.RWMutex
	byCall map[string]map[string]*bookGrant // tenant\x00agent\x00tool → grant id →
	byID   map[string]string                // grant id → byCall key

	watcher jetstream.KeyWatcher
	done    chan struct{}
	// changed is closed and replaced at every change the watch delivers.
	changed chan struct{}
}

type bookGrant struct {
	g    contracts.Grant
	cond *policy.GrantCondition // compiled condition of a condition grant
}

// NewGrantBook opens hitl_grants and starts the watch; it returns once
// the grants stored so far are loaded. Stop it with Close.
func NewGrantBook(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*GrantBook, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := js.KeyValue(ctx, contracts.BucketGrants)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketGrants, err)
	}
	b := &GrantBook{kv: kv, log: log, byCall: map[string]map[string]*bookGrant{}, byID: map[string]string{},
		done: make(chan struct{}), changed: make(chan struct{})}
	b.watcher, err = kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("orchestrator: watch bucket %s: %w", contracts.BucketGrants, err)
	}
	loaded := make(chan struct{})
	go b.run(loaded)
	select {
	case <-loaded:
		return b, nil
	case <-ctx.Done():
		_ = b.Close()
		return nil, ctx.Err()
	}
}

func (b *GrantBook) run(loaded chan struct{}) {
	defer close(b.done)
	for e := range b.watcher.Updates() {
		if e == nil {
			if loaded != nil {
				close(loaded)
				loaded = nil
			}
			continue
		}
		b.observe(e)
		b.mu.Lock()
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	}
}

// Await returns once the watch has delivered grant id (a grant an
// approval just issued reaches each process's book a moment after the
// approval's decision), or ctx ends. Until then this process's gates ask
// for approval as they would without the grant.
func (b *GrantBook) Await(ctx context.Context, id string) error {
	for {
		b.mu.RLock()
		_, ok := b.byID[id]
		changed := b.changed
		b.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.done:
			return errors.New("orchestrator: the grant book is closed")
		}
	}
}

func (b *GrantBook) observe(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		b.remove(e.Key())
		return
	}
	var g contracts.Grant
	if err := contracts.Decode(e.Value(), &g); err != nil || g.GrantID != e.Key() {
		b.log.Warn("unreadable grant ignored", "grant_id", e.Key(), "err", err)
		b.remove(e.Key())
		return
	}
	bg := &bookGrant{g: g}
	if g.Arguments == contracts.GrantArgumentsCondition {
		c, err := policy.CompileGrantCondition(g.Condition)
		if err != nil {
			b.log.Warn("grant condition does not compile; the grant covers nothing", "grant_id", g.GrantID, "err", err)
		}
		bg.cond = c
	}
	key := callKey(g.Tenant, g.Agent, g.Tool)
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.byID[g.GrantID]; ok && old != key {
		delete(b.byCall[old], g.GrantID)
	}
	if b.byCall[key] == nil {
		b.byCall[key] = map[string]*bookGrant{}
	}
	b.byCall[key][g.GrantID] = bg
	b.byID[g.GrantID] = key
}

func (b *GrantBook) remove(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if key, ok := b.byID[id]; ok {
		delete(b.byCall[key], id)
		if len(b.byCall[key]) == 0 {
			delete(b.byCall, key)
		}
		delete(b.byID, id)
	}
}

func callKey(tenant, agent, tool string) string { return tenant + "\x00" + agent + "\x00" + tool }

// candidates are the grants of a tenant, agent and tool.
func (b *GrantBook) candidates(tenant, agent, tool string) []*bookGrant {
	b.mu.RLock()
	defer b.mu.RUnlock()
	m := b.byCall[callKey(tenant, agent, tool)]
	out := make([]*bookGrant, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	return out
}

// Get reads a grant from the bucket (not from the watch).
func (b *GrantBook) Get(ctx context.Context, id string) (contracts.Grant, error) {
	e, err := b.kv.Get(ctx, id)
	if err != nil {
		return contracts.Grant{}, err
	}
	var g contracts.Grant
	if err := contracts.Decode(e.Value(), &g); err != nil {
		return g, fmt.Errorf("grant %s is unreadable: %w", id, err)
	}
	return g, nil
}

// List returns every grant the watch knows.
func (b *GrantBook) List() []contracts.Grant {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]contracts.Grant, 0, len(b.byID))
	for _, m := range b.byCall {
		for _, g := range m {
			out = append(out, g.g)
		}
	}
	return out
}

// Close stops the watch.
func (b *GrantBook) Close() error {
	err := b.watcher.Stop()
	<-b.done
	return err
}

// grantMetrics counts the calls grants allowed.
type grantMetrics struct {
	uses *prometheus.CounterVec
}

func newGrantMetrics(reg prometheus.Registerer) grantMetrics {
	m := grantMetrics{uses: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_grant_uses_total", Help: "Calls a standing grant allowed without a new request, by rule.",
	}, []string{"rule"})}
	if reg != nil {
		if err := reg.Register(m.uses); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				m.uses = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return m
}

// grantVerdict allows a gated call that an active grant covers: the grant
// is read again from the bucket, its use is recorded in its timeline
// (hitl.grant.used.<grant_id>), and only then is the call allowed. It
// reports false when no grant covers the call, or the use could not be
// recorded (the call then asks a human, as it would without grants).
func (g *Gate) grantVerdict(ctx context.Context, run contracts.Run, c ToolCall, args json.RawMessage, sha string, d policy.Decision, eventID string) (Verdict, bool) {
	if g.grants == nil {
		return Verdict{}, false
	}
	in := policy.Input{Run: run, Tool: c.Name, Arguments: args}
	call := approval.GrantCall{
		Tenant: run.Tenant, Agent: run.Agent, RunID: run.ID, Tool: c.Name,
		Arguments: args, ArgumentsSHA256: sha, Rule: d.Rule, Limits: d.Grants,
	}
	now := g.cfg.Now()
	for _, cand := range g.grants.candidates(run.Tenant, run.Agent, c.Name) {
		match := func(string) (bool, error) {
			if cand.cond == nil {
				return false, errors.New("no compiled condition")
			}
			return cand.cond.Match(ctx, in)
		}
		if ok, _ := approval.GrantCovers(&cand.g, call, now, match); !ok {
			continue
		}
		// The watch may be behind a revocation: the bucket has the last word.
		fresh, err := g.grants.Get(ctx, cand.g.GrantID)
		if err != nil {
			g.cfg.Logger.Warn("grant could not be read; the call asks for approval", "grant_id", cand.g.GrantID, "err", err)
			continue
		}
		if ok, _ := approval.GrantCovers(&fresh, call, g.cfg.Now(), match); !ok {
			continue
		}
		ev := contracts.GrantEvent{
			Spec: contracts.SpecGrantEvent, GrantID: fresh.GrantID, Event: contracts.GrantEventUsed, By: []string{run.Agent},
			RunID: run.ID, ToolCallID: c.ID, Tool: c.Name, ArgumentsSHA256: sha, At: g.cfg.Now().UTC(),
		}
		if _, err := events.Publish(ctx, g.cfg.JS, contracts.GrantUsedSubject(fresh.GrantID), ev, "grant-used:"+fresh.GrantID+":"+eventID, nil); err != nil {
			g.cfg.Logger.Warn("grant use could not be recorded; the call asks for approval", "grant_id", fresh.GrantID, "err", err)
			return Verdict{}, false
		}
		g.gm.uses.WithLabelValues(fresh.Policy.Rule).Inc()
		return Verdict{
			ToolCallID: c.ID, Verdict: VerdictAllowed, Rule: d.Rule, Arguments: args, GrantID: fresh.GrantID,
			Permit: &Permit{
				g: g, grantID: fresh.GrantID, sha: sha, args: args, grantCall: call, grantIn: in,
				attest: &receipt.Claims{
					Tenant: run.Tenant, Agent: run.Agent, RunID: run.ID, ToolCallID: c.ID, Tool: c.Name,
					ArgsSHA256: sha, Basis: receipt.BasisGrant, Grant: fresh.GrantID, DecidedBy: slices.Clone(fresh.GrantedBy),
					Rule: d.Rule, PolicyVersion: d.Version,
					// A receipt never outlives its grant (the signer caps it at its TTL).
					ExpiresAt: fresh.ExpiresAt.Unix(),
				},
			},
		}, true
	}
	return Verdict{}, false
}

// claimGrant checks, right before the call runs, that the permit's grant
// still covers it: revoked or expired since, it no longer does.
func (p *Permit) claimGrant(ctx context.Context) error {
	fresh, err := p.g.grants.Get(ctx, p.grantID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrNotApproved
	}
	if err != nil {
		return err
	}
	call := p.grantCall
	switch d := p.g.cfg.Policy.Current().Evaluate(p.grantIn); d.Action {
	case policy.ActionAllow:
		return nil
	case policy.ActionDeny:
		return ErrNotApproved
	default:
		call.Rule, call.Limits = d.Rule, d.Grants
	}
	var cond *policy.GrantCondition
	if fresh.Arguments == contracts.GrantArgumentsCondition {
		cond, _ = policy.CompileGrantCondition(fresh.Condition)
	}
	ok, _ := approval.GrantCovers(&fresh, call, p.g.cfg.Now(), func(string) (bool, error) {
		if cond == nil {
			return false, errors.New("no compiled condition")
		}
		return cond.Match(ctx, p.grantIn)
	})
	if !ok {
		return ErrNotApproved
	}
	return nil
}

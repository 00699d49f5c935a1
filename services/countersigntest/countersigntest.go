// Package countersigntest is Countersign's test kit: it starts the pieces
// of an approval stack that a test needs around it, each stopped when the
// test ends — an arbiter (RunArbiter), a gate on a parsed policy (Gate,
// Policy), the fleet's live policy (LivePolicy) — and, for examples and
// programs without a *testing.T, a whole bus in one process (StartStack).
// It lives beside the server roles it starts; tests of any package may
// import it.
//
// The arbiter checks every request against the policy version it names.
// A gate started here on a policy held in memory (a StaticPolicy, or the
// fallback of LivePolicy) makes that policy known to the arbiters RunArbiter
// starts for the same test, as a deployment lists such policies in
// arbiter.Config.Policies; policies applied to the hitl_policy bucket are
// read from there.
//
// Clock is a fake clock for expiry, reminders and escalation: the
// components under test read its Now, and Advance moves it and plays the
// server's scheduler for the arbiter's timers (JetStream message schedules
// on HITL_TIMERS), so "eight hours later" takes no wall time. Wait for a
// timer with Clock.WaitScheduled before advancing past it; StartStack's
// WithClock runs a Stack on one.
package countersigntest

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
)

// RunArbiter starts an arbiter with cfg and stops it, waiting for it, when
// the test ends. Besides cfg.Policies, it trusts the policies of the gates
// Gate and LivePolicy start for the same test, whenever they are started.
func RunArbiter(tb testing.TB, cfg arbiter.Config) {
	tb.Helper()
	cfg.Policies = policySets{cfg.Policies, memoryPolicies(tb)}
	ctx, cancel := context.WithCancel(context.Background())
	arb, err := arbiter.New(ctx, cfg)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = arb.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
}

// Policy parses a policy document or fails the test.
func Policy(tb testing.TB, yaml string) *policy.Policy {
	tb.Helper()
	p, err := policy.Parse([]byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Gate returns a gate on js deciding by src, closed when the test ends. A
// StaticPolicy's policy becomes known to the test's arbiters (RunArbiter).
func Gate(tb testing.TB, js jetstream.JetStream, src orchestrator.PolicySource) *orchestrator.Gate {
	tb.Helper()
	if s, ok := src.(orchestrator.StaticPolicy); ok && s.P != nil {
		memoryPolicies(tb).add(s.P)
	}
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: js, Policy: src})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = gate.Close() })
	return gate
}

// LivePolicy opens the fleet's live policy store on js, serving fallback
// until a policy is applied, closed when the test ends. The fallback becomes
// known to the test's arbiters (RunArbiter).
func LivePolicy(tb testing.TB, js jetstream.JetStream, fallback string) *orchestrator.PolicyStore {
	tb.Helper()
	p := Policy(tb, fallback)
	memoryPolicies(tb).add(p)
	store, err := orchestrator.OpenPolicyStore(context.Background(), orchestrator.PolicyStoreConfig{JS: js, Fallback: p})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}

// Trust makes ps known to the test's arbiters (RunArbiter), as a deployment
// lists the policies its gates serve from memory in arbiter.Config.Policies:
// for a gate a test builds itself on a StaticPolicy.
func Trust(tb testing.TB, ps ...*policy.Policy) {
	for _, p := range ps {
		memoryPolicies(tb).add(p)
	}
}

// memory holds, per test, the policies the test's gates serve from memory.
var memory sync.Map // testing.TB → *memorySet

type memorySet struct {
	mu sync.Mutex
	ps arbiter.Policies
}

func memoryPolicies(tb testing.TB) *memorySet {
	if s, ok := memory.Load(tb); ok {
		return s.(*memorySet)
	}
	s, loaded := memory.LoadOrStore(tb, &memorySet{})
	if !loaded {
		tb.Cleanup(func() { memory.Delete(tb) })
	}
	return s.(*memorySet)
}

func (s *memorySet) add(p *policy.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ps = append(s.ps, p)
}

// Policy returns the latest policy added with the version.
func (s *memorySet) Policy(version string) *policy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.ps) - 1; i >= 0; i-- {
		if s.ps[i].Version() == version {
			return s.ps[i]
		}
	}
	return nil
}

// policySets asks each set in turn.
type policySets []arbiter.PolicySet

func (ss policySets) Policy(version string) *policy.Policy {
	for _, s := range ss {
		if s == nil {
			continue
		}
		if p := s.Policy(version); p != nil {
			return p
		}
	}
	return nil
}

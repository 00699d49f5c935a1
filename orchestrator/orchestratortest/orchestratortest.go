// Package orchestratortest starts the pieces of an approval stack that
// tests of other packages need around them: an arbiter, and a gate on a
// parsed policy, each stopped when the test ends.
package orchestratortest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/arbiter"
	"github.com/countersign/countersign/orchestrator/policy"
)

// RunArbiter starts an arbiter with cfg and stops it, waiting for it, when
// the test ends.
func RunArbiter(tb testing.TB, cfg arbiter.Config) {
	tb.Helper()
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

// Gate returns a gate on js deciding by src, closed when the test ends.
func Gate(tb testing.TB, js jetstream.JetStream, src orchestrator.PolicySource) *orchestrator.Gate {
	tb.Helper()
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: js, Policy: src})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = gate.Close() })
	return gate
}

// LivePolicy opens the fleet's live policy store on js, serving fallback
// until a policy is applied, closed when the test ends.
func LivePolicy(tb testing.TB, js jetstream.JetStream, fallback string) *orchestrator.PolicyStore {
	tb.Helper()
	store, err := orchestrator.OpenPolicyStore(context.Background(), orchestrator.PolicyStoreConfig{JS: js, Fallback: Policy(tb, fallback)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}

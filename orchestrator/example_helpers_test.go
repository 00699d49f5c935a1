package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

// examplePolicy is the policy the examples' gate decides by.
const examplePolicy = `
version: "example-1"
default: require_approval
rules:
  - name: read-only-tools
    tools: ["search_*", "read_*"]
    action: allow
  - name: no-shell
    tools: ["shell.*"]
    action: deny
    reason: "Agents may not run shell commands."
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
  - name: ask-a-human
    tools: ["request_human_input"]
    action: require_approval
`

// exampleStack is everything a gate needs around it, in one process
// (countersigntest.Stack: an embedded NATS server with one user per role,
// the streams and buckets, an arbiter that trusts examplePolicy) and a gate
// on that policy. A human is played by a resolver on the bus (humanDecides).
type exampleStack struct {
	gate  *orchestrator.Gate
	stack *countersigntest.Stack

	ctx      context.Context
	resolver jetstream.JetStream
	wg       sync.WaitGroup
}

// startExampleStack starts the stack; the returned func stops it and
// prints any permission the NATS server refused a role (which makes the
// example's output, and so the example, fail).
func startExampleStack() (*exampleStack, func()) {
	stack, err := countersigntest.StartStack(examplePolicy)
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &exampleStack{ctx: ctx, stack: stack}
	s.resolver, err = stack.JetStream(embedded.RoleResolver)
	must(err)
	orch, err := stack.JetStream(embedded.RoleOrchestrator)
	must(err)
	s.gate, err = orchestrator.NewGate(ctx, orchestrator.Config{JS: orch, Policy: orchestrator.StaticPolicy{P: stack.Policy}})
	must(err)
	return s, func() {
		cancel()
		s.wg.Wait()
		_ = s.gate.Close()
		if err := stack.Close(); err != nil {
			fmt.Println(err)
		}
	}
}

// humanDecides plays approver: every approval that comes up pending gets
// vote v from them, published on the bus as a trusted resolver would
// (the inbox, Slack, email and the CLI end in the same kind of vote).
func (s *exampleStack) humanDecides(approver string, v contracts.Vote) {
	wait, err := s.stack.OnPending(s.ctx, func(eventID string) {
		vote := v
		vote.Spec, vote.VoteID, vote.EventID = contracts.SpecVote, uuid.NewString(), eventID
		vote.Approver = contracts.Approver{ID: approver, Via: contracts.ViaNATS}
		vote.DecidedAt = time.Now().UTC()
		if _, err := events.Publish(s.ctx, s.resolver, contracts.ResolvedSubject(vote.EventID), vote, vote.VoteID, nil); err != nil && s.ctx.Err() == nil {
			fmt.Println("vote:", err)
		}
	})
	must(err)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); wait() }()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/countersigntest"
)

// examplePolicy is the policy the examples' API decides by.
const examplePolicy = `
version: "client-example-1"
default: require_approval
rules:
  - name: read-only-tools
    tools: ["search_*"]
    action: allow
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice]
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
`

// exampleStack is a Countersign HTTP API in one process, as `countersign
// serve` runs it: an embedded NATS server with one user per role, the
// streams and buckets, an arbiter (countersigntest.Stack), and the API on
// an httptest server.
type exampleStack struct {
	// url is the API's base URL; agentToken authenticates an agent.
	url        string
	agentToken string

	ctx        context.Context
	aliceToken string
	stack      *countersigntest.Stack
	wg         sync.WaitGroup
}

// startExampleStack starts the stack; the returned func stops it and
// prints any permission the NATS server refused a role (which makes the
// example's output, and so the example, fail).
func startExampleStack() (*exampleStack, func()) {
	stack, err := countersigntest.StartStack(examplePolicy)
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &exampleStack{ctx: ctx, stack: stack}
	apiJS, err := stack.JetStream(embedded.RoleAPI)
	must(err)
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: apiJS, Policy: orchestrator.StaticPolicy{P: stack.Policy}})
	must(err)
	var tokens []api.Token
	token := func(subject, role string) string {
		tok, hash, err := api.NewToken()
		must(err)
		tokens = append(tokens, api.Token{Name: subject, Subject: subject, SHA256: hash, Roles: []string{role}})
		return tok
	}
	s.agentToken = token("billing-bot", api.RoleAgent)
	s.aliceToken = token("alice", api.RoleApprover)
	server, err := api.New(ctx, api.Config{JS: apiJS, Gate: gate, Tokens: tokens})
	must(err)
	hs := httptest.NewServer(server.Handler())
	s.url = hs.URL

	return s, func() {
		cancel()
		hs.Close()
		_ = server.Close()
		s.wg.Wait()
		_ = gate.Close()
		if err := stack.Close(); err != nil {
			fmt.Println(err)
		}
	}
}

// aliceDecides plays the approver alice: every approval that comes up
// pending gets vote v from her, through the API with her own token, as the
// inbox or the CLI would send it.
func (s *exampleStack) aliceDecides(v client.Vote) {
	alice, err := client.New(client.Config{URL: s.url, Token: s.aliceToken})
	must(err)
	wait, err := s.stack.OnPending(s.ctx, func(eventID string) {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		if _, err := alice.Decide(ctx, eventID, v); err != nil && s.ctx.Err() == nil {
			fmt.Println("alice's vote:", err)
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

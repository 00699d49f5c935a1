package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
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

// exampleStack is everything a gate needs around it, in one process: an
// embedded NATS server with one user per role, the streams and buckets,
// an arbiter that trusts examplePolicy, and a gate on that policy. A human
// is played by a resolver on the bus (humanDecides).
type exampleStack struct {
	gate *orchestrator.Gate

	ctx      context.Context
	resolver jetstream.JetStream
	wg       sync.WaitGroup
}

// startExampleStack starts the stack; the returned func stops it and
// prints any permission the NATS server refused a role (which makes the
// example's output, and so the example, fail).
func startExampleStack() (*exampleStack, func()) {
	dir, err := os.MkdirTemp("", "countersign-example")
	must(err)
	users := map[embedded.Role]embedded.User{}
	list := embedded.GenerateUsers(embedded.Roles...)
	for _, u := range list {
		users[u.Role] = u
	}
	refused := &violationLog{}
	srv, err := embedded.Start(embedded.Config{StoreDir: dir, NoListen: true, Users: list,
		Logger: slog.New(slog.NewTextHandler(refused, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	must(err)
	var conns []*nats.Conn
	connect := func(role embedded.Role) jetstream.JetStream {
		nc, err := srv.Connect(users[role])
		must(err)
		conns = append(conns, nc)
		js, err := jetstream.New(nc)
		must(err)
		return js
	}
	ctx, cancel := context.WithCancel(context.Background())
	must(events.Provision(ctx, connect(embedded.RoleAdmin), events.ProvisionConfig{}))

	pol, err := policy.Parse([]byte(examplePolicy))
	must(err)
	arb, err := arbiter.New(ctx, arbiter.Config{JS: connect(embedded.RoleArbiter), Policies: arbiter.Policies{pol}})
	must(err)
	s := &exampleStack{ctx: ctx, resolver: connect(embedded.RoleResolver)}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = arb.Run(ctx) }()
	s.gate, err = orchestrator.NewGate(ctx, orchestrator.Config{JS: connect(embedded.RoleOrchestrator),
		Policy: orchestrator.StaticPolicy{P: pol}})
	must(err)

	return s, func() {
		cancel()
		s.wg.Wait()
		_ = s.gate.Close()
		for _, nc := range conns {
			nc.Close()
		}
		srv.Shutdown()
		_ = os.RemoveAll(dir)
		for _, line := range refused.lines() {
			fmt.Println("the NATS server refused a role:", line)
		}
	}
}

// humanDecides plays approver: every approval that comes up pending gets
// vote v from them, published on the bus as a trusted resolver would
// (the inbox, Slack, email and the CLI end in the same kind of vote).
func (s *exampleStack) humanDecides(approver string, v contracts.Vote) {
	kv, err := s.resolver.KeyValue(s.ctx, contracts.BucketApprovals)
	must(err)
	w, err := kv.WatchAll(s.ctx)
	must(err)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { _ = w.Stop() }()
		voted := map[string]bool{}
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-s.ctx.Done():
				return
			case e = <-w.Updates():
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rec contracts.Record
			if json.Unmarshal(e.Value(), &rec) != nil || rec.Status != contracts.StatusPending || voted[e.Key()] {
				continue
			}
			voted[e.Key()] = true
			vote := v
			vote.Spec, vote.VoteID, vote.EventID = contracts.SpecVote, uuid.NewString(), e.Key()
			vote.Approver = contracts.Approver{ID: approver, Via: contracts.ViaNATS}
			vote.DecidedAt = time.Now().UTC()
			if _, err := events.Publish(s.ctx, s.resolver, contracts.ResolvedSubject(vote.EventID), vote, vote.VoteID, nil); err != nil && s.ctx.Err() == nil {
				fmt.Println("vote:", err)
			}
		}
	}()
}

// violationLog keeps the permission violations the server logs. Clients
// delete the ordered consumers of their watches where their role may not;
// the server expires those itself, so those refusals are left out.
type violationLog struct {
	mu  sync.Mutex
	bad []string
}

func (l *violationLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	if strings.Contains(line, "Violation") && !strings.Contains(line, "$JS.API.CONSUMER.DELETE.") {
		l.mu.Lock()
		l.bad = append(l.bad, line)
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *violationLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

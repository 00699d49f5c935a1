package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// Who the bench is in the approval flow.
const (
	benchAgent    = "bench-agent"
	benchAgentBy  = "agent:bench"
	benchApprover = "bench-approver"
	benchTool     = "payments.send"
	benchCallID   = "call-1"
)

// benchArguments is a typical tool call's arguments, about 300 bytes.
var benchArguments = json.RawMessage(`{"recipient":"ACME GmbH","iban":"DE89370400440532013000",` +
	`"bic":"COBADEFFXXX","amount":1250.75,"currency":"EUR","reference":"INV-2025-00042",` +
	`"memo":"Quarterly licence renewal for the analytics platform, budget line 7.3",` +
	`"tags":["finance","recurring","q3"],"execute_at":"2025-07-01T09:00:00Z","dry_run":false}`)

// bot is a resolver whose human decides the moment a request can be
// decided. It watches the approvals bucket on the voter's connection. In auto
// mode it approves a request once its record is pending and the agent has
// reported the review parked (ReviewAsync returned: the request is published
// and the wait registered and checked), as a human's vote always comes after
// the run waits. Otherwise it only tells the harness that a record is
// pending, so the harness can time the vote itself.
//
// It reacts to the record rather than to the request message: a vote that
// overtakes its record is retried by the arbiter after a delay, which would
// measure the retry delay instead of the flow.
type bot struct {
	st   *stack
	w    jetstream.KeyWatcher
	auto bool
	done chan struct{}

	mu     sync.Mutex
	expect map[string]chan struct{}
	// half holds the requests that are either pending or parked, but not
	// yet both (auto mode).
	half map[string]uint8
}

var pendingText = []byte(`"status":"` + contracts.StatusPending + `"`)

// Halves of the condition for an auto vote.
const (
	seenPending uint8 = 1 << iota
	agentParked
)

func startBot(ctx context.Context, st *stack, auto bool) (*bot, error) {
	w, err := st.kv.WatchAll(context.WithoutCancel(ctx), jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("bot watch: %w", err)
	}
	b := &bot{
		st: st, w: w, auto: auto, done: make(chan struct{}),
		expect: map[string]chan struct{}{}, half: map[string]uint8{},
	}
	go b.loop()
	return b, nil
}

func (b *bot) loop() {
	defer close(b.done)
	for e := range b.w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		// A pending record always holds this text; skipping the others
		// without decoding keeps the bot's share of the CPU small.
		if !bytes.Contains(e.Value(), pendingText) {
			continue
		}
		var rec struct {
			Status string     `json:"status"`
			Votes  []struct{} `json:"votes"`
		}
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
			continue
		}
		if b.auto {
			b.mark(e.Key(), seenPending)
			continue
		}
		b.mu.Lock()
		ch := b.expect[e.Key()]
		delete(b.expect, e.Key())
		b.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}
}

// parked tells an auto bot that the agent's review of eventID is waiting.
func (b *bot) parked(eventID string) { b.mark(eventID, agentParked) }

// mark records one half of the vote condition and votes on the second.
func (b *bot) mark(eventID string, half uint8) {
	b.mu.Lock()
	got := b.half[eventID] | half
	if got == seenPending|agentParked {
		delete(b.half, eventID)
	} else {
		b.half[eventID] = got
	}
	b.mu.Unlock()
	if got == seenPending|agentParked {
		b.approveAsync(eventID)
	}
}

// expectPending returns a channel closed when the record of eventID is
// first seen pending.
func (b *bot) expectPending(eventID string) <-chan struct{} {
	ch := make(chan struct{})
	b.mu.Lock()
	b.expect[eventID] = ch
	b.mu.Unlock()
	return ch
}

// approveAsync sends an approval as a resolver does, without waiting for it
// here; a failure shows as a cycle that never resumes.
func (b *bot) approveAsync(eventID string) {
	go func() { _ = b.st.vote(context.Background(), eventID) }()
}

func (b *bot) stop() {
	_ = b.w.Stop()
	<-b.done
}

// benchVote is the bot's approval of eventID (its vote id derived from the
// event id, so a repeated vote is de-duplicated).
func benchVote(eventID string) contracts.Vote {
	return contracts.Vote{
		Spec: contracts.SpecVote, VoteID: "bench-" + eventID, EventID: eventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: benchApprover, Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC(),
	}
}

// voteMsg is the bot's approval of eventID as a message to store on the
// resolved subject, and its vote id.
func voteMsg(eventID string) (*nats.Msg, string) {
	v := benchVote(eventID)
	data, _ := json.Marshal(v)
	return &nats.Msg{Subject: contracts.ResolvedSubject(eventID), Data: data}, v.VoteID
}

// vote sends the bot's approval of eventID as the resolvers do: by request
// to the arbiter, else stored (events.VoteSender).
func (st *stack) vote(ctx context.Context, eventID string) error {
	v := benchVote(eventID)
	_, err := st.votes.Send(ctx, st.voterJS, &v)
	return err
}

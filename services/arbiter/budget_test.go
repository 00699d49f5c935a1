package arbiter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// hardText is n bytes of valid text that costs the most once encoded:
// quotes, backslashes and newlines take two bytes each, and "<", ">", "&"
// would take six if the record were HTML-escaped.
func hardText(n int) string {
	return strings.Repeat("\"\\\n<&>", n/6+1)[:n]
}

// objectOf is a JSON object whose canonical form is exactly n bytes: one
// member whose string value is filled with characters that escaping would
// grow.
func objectOf(t *testing.T, key string, n int) json.RawMessage {
	t.Helper()
	fill := n - len(`{"":""}`) - len(key)
	raw := json.RawMessage(`{"` + key + `":"` + strings.Repeat("<&>x", fill/4+1)[:fill] + `"}`)
	canon, err := contracts.Canonicalize(raw)
	if err != nil || len(canon) != n {
		t.Fatalf("objectOf(%d): %d bytes, %v", n, len(canon), err)
	}
	return canon
}

// schemaOf is a JSON Schema of compact size n that accepts any object.
func schemaOf(t *testing.T, n int) json.RawMessage {
	t.Helper()
	head := `{"type":"object","description":"`
	fill := n - len(head) - len(`"}`)
	return json.RawMessage(head + strings.Repeat("d", fill) + `"}`)
}

// budget is a bus whose arbiter runs on a fake clock, as the arbiter role.
type budget struct {
	*clockBus
	lim      contracts.Limits
	resolver jetstream.JetStream
}

func newBudget(t *testing.T) *budget {
	t.Helper()
	b := newClockBus(t)
	// Receipts with the longest key id and issuer a signer takes.
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key.ID = strings.Repeat("k", contracts.MaxReceiptKeyIDBytes)
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key, Issuer: strings.Repeat("i", contracts.MaxReceiptIssuerBytes), Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	b.startArbiter(arbiter.Config{Receipts: signer})
	mp := b.srv.JetStreamAs(embedded.RoleArbiter).Conn().MaxPayload()
	if mp != contracts.DefaultMaxPayload {
		t.Fatalf("the server's max payload is %d, want the default %d", mp, contracts.DefaultMaxPayload)
	}
	return &budget{clockBus: b, lim: contracts.LimitsFor(mp), resolver: b.srv.JetStreamAs(embedded.RoleResolver)}
}

// maxRequest is the largest tool approval each surface accepts: arguments
// and schema at their limits, long ids, approvers who may each decide.
func (b *budget) maxRequest(t *testing.T, opts ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	t.Helper()
	b.catchUp()
	now := b.clock.Now().UTC()
	args := objectOf(t, "requested", b.lim.Arguments)
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	req := request(t, func(r *contracts.ApprovalRequested) {
		r.EventID = "budget-" + uuid.NewString()
		r.ToolCall = &contracts.ToolCall{ID: "call-1", Name: "bulk.import", Arguments: args, ArgumentsSHA256: sha}
		r.ToolSchema = schemaOf(t, b.lim.Schema)
		r.Quorum = contracts.Quorum{Required: 2, Approvers: []string{"alice", "bob", "carol"}, Veto: true, Order: contracts.OrderAny}
		r.AllowedDecisions = nil
		r.CreatedAt = now
		r.ExpiresAt = now.Add(time.Hour)
		// The submitting agent claims, under the longest name there is.
		r.Submitter = hardText(contracts.MaxApproverIDBytes)
	})
	for _, o := range opts {
		o(&req)
	}
	if err := b.lim.CheckRequest(&req); err != nil {
		t.Fatalf("the largest request does not pass the budget: %v", err)
	}
	return req
}

func (b *budget) vote(t *testing.T, v contracts.Vote) {
	t.Helper()
	data, err := contracts.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.PublishRaw(context.Background(), b.resolver, contracts.ResolvedSubject(v.EventID), data, v.VoteID, nil); err != nil {
		t.Fatalf("publish vote %s: %v", v.VoteID, err)
	}
}

// newVote is a vote with the longest vote id and comment.
func (b *budget) newVote(id, approver, decision string, opts ...func(*contracts.Vote)) contracts.Vote {
	v := vote("", approver, decision)
	prefix := id + "-" + approver + "-" + uuid.NewString() + "-"
	v.VoteID = prefix + strings.Repeat("v", contracts.MaxClientIDBytes-len(prefix))
	v.Comment = hardText(contracts.MaxCommentBytes)
	for _, o := range opts {
		o(&v)
	}
	return v
}

// fillRefused has outsiders with the longest ids cast n refused votes, the
// longest refusal detail included, and waits until all are recorded.
func (b *budget) fillRefused(t *testing.T, id string, n int) {
	t.Helper()
	rec, _ := b.record(id)
	before := len(rec.RefusedVotes) + rec.RefusedVotesOmitted
	for i := range n {
		v := contracts.Vote{
			Spec: contracts.SpecVote, EventID: id, Decision: strings.Repeat("<", 40),
			VoteID:   fmt.Sprintf("r%03d-%s-%s", before+i, id, strings.Repeat("x", contracts.MaxClientIDBytes-6-len(id))),
			Approver: contracts.Approver{ID: fmt.Sprintf("%03d", i) + hardText(contracts.MaxApproverIDBytes-3), Via: strings.Repeat("n", contracts.MaxViaBytes)},
		}
		b.vote(t, v)
	}
	b.waitRecord(id, func(r *contracts.Record) bool { return len(r.RefusedVotes)+r.RefusedVotesOmitted >= before+n })
}

func (b *budget) valueSize(t *testing.T, id string) int {
	t.Helper()
	entry, err := b.kv.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return len(entry.Value())
}

// TestSizeBudgetEveryTerminalPath drives the largest request the surfaces
// accept, with the largest votes, a full refused-vote history and counted
// votes before the decision, through every terminal path on a server with
// the default max payload: every record is written, then claimed where it
// was approved, and still records refused votes afterwards.
func TestSizeBudgetEveryTerminalPath(t *testing.T) {
	b := newBudget(t)
	edited := func(key string) func(*contracts.Vote) {
		return func(v *contracts.Vote) { v.Arguments = objectOf(t, key, b.lim.Arguments) }
	}
	// Before the decision: alice's edit with the largest arguments and
	// comment counts, without deciding (a quorum of two).
	aliceEdits := func(t *testing.T, id string) {
		v := b.newVote("pre", "alice", contracts.DecisionEdit, edited("alice"))
		v.EventID = id
		b.vote(t, v)
		b.waitRecord(id, func(r *contracts.Record) bool { return len(r.Votes) == 1 })
	}
	cases := []struct {
		name   string
		opts   []func(*contracts.ApprovalRequested)
		before func(t *testing.T, id string)
		decide func(t *testing.T, id string)
		status string
		claim  bool
	}{
		{name: "approve", before: aliceEdits, status: contracts.StatusApproved, claim: true,
			decide: func(t *testing.T, id string) {
				v := b.newVote("decide", "bob", contracts.DecisionApprove)
				v.EventID = id
				b.vote(t, v)
			}},
		{name: "edit", opts: []func(*contracts.ApprovalRequested){quorum(1), noVeto}, status: contracts.StatusApproved, claim: true,
			before: func(t *testing.T, id string) {
				// A rejection that does not veto counts without deciding.
				v := b.newVote("pre", "alice", contracts.DecisionReject)
				v.EventID = id
				b.vote(t, v)
				b.waitRecord(id, func(r *contracts.Record) bool { return len(r.Votes) == 1 })
			},
			decide: func(t *testing.T, id string) {
				v := b.newVote("decide", "bob", contracts.DecisionEdit, edited("bob"))
				v.EventID = id
				b.vote(t, v)
			}},
		{name: "reject", before: aliceEdits, status: contracts.StatusRejected,
			decide: func(t *testing.T, id string) {
				v := b.newVote("decide", "bob", contracts.DecisionReject)
				v.EventID = id
				b.vote(t, v)
			}},
		{name: "respond", before: aliceEdits, status: contracts.StatusResponded,
			decide: func(t *testing.T, id string) {
				v := b.newVote("decide", "bob", contracts.DecisionRespond)
				v.EventID = id
				b.vote(t, v)
			}},
		{name: "answer", status: contracts.StatusAnswered,
			opts: []func(*contracts.ApprovalRequested){humanInput, func(r *contracts.ApprovalRequested) {
				r.Question = &contracts.Question{Text: hardText(contracts.MaxQuestionTextBytes), Schema: schemaOf(t, b.lim.Schema)}
			}},
			decide: func(t *testing.T, id string) {
				v := b.newVote("decide", "bob", contracts.DecisionAnswer)
				v.EventID = id
				v.Answer = &contracts.Answer{Action: contracts.AnswerAccept, Content: objectOf(t, "answer", b.lim.AnswerContent)}
				b.vote(t, v)
			}},
		{name: "expire", before: aliceEdits, status: contracts.StatusApproved, claim: true,
			opts: []func(*contracts.ApprovalRequested){onTimeoutApprove, func(r *contracts.ApprovalRequested) {
				r.Policy.Version = "v1-approve-on-timeout-1h"
			}},
			decide: func(t *testing.T, id string) {
				// The deadline comes (an extend can no longer bring it
				// forward).
				rec, _ := b.record(id)
				b.scheduled(id, contracts.TimerExpire, rec.ExpiresAt)
				b.advance(rec.ExpiresAt.Sub(b.clock.Now()))
			}},
		{name: "cancel", before: aliceEdits, status: contracts.StatusCancelled,
			decide: func(t *testing.T, id string) {
				b.command(contracts.Command{
					Spec: contracts.SpecCommand, EventID: id, Command: contracts.CommandCancel,
					CommandID: strings.Repeat("c", contracts.MaxClientIDBytes), By: hardText(contracts.MaxApproverIDBytes),
				})
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := b.maxRequest(t, tc.opts...)
			id := req.EventID
			b.create(req)
			b.fillRefused(t, id, contracts.MaxRefusedVotes+3)
			if tc.before != nil {
				tc.before(t, id)
			}
			tc.decide(t, id)
			rec := b.waitRecord(id, terminal)
			if rec.Status != tc.status {
				t.Fatalf("status %s, want %s (outcome %+v)", rec.Status, tc.status, rec.Outcome)
			}
			if tc.status == contracts.StatusApproved && rec.Outcome.ArgumentsSHA256 == req.ToolCall.ArgumentsSHA256 {
				t.Fatalf("approved the requested arguments, want the largest edit's")
			}
			if tc.claim {
				b.command(contracts.Command{
					Spec: contracts.SpecCommand, EventID: id, Command: contracts.CommandClaim,
					CommandID: strings.Repeat("k", contracts.MaxClientIDBytes), ClaimID: strings.Repeat("k", contracts.MaxClientIDBytes),
					By: hardText(contracts.MaxApproverIDBytes),
				})
				c := b.waitRecord(id, func(r *contracts.Record) bool { return r.Claim != nil }).Claim
				b.waitChanged(id, contracts.ChangeClaimed) // the receipt is stored before this
				if c.ReceiptID == "" || b.issuedReceipt(id).Receipt == "" {
					t.Fatal("claimed without a receipt")
				}
			}
			// Refused votes are still recorded on the decided record.
			before := rec.RefusedVotesOmitted
			b.fillRefused(t, id, 3)
			rec, _ = b.record(id)
			if rec.RefusedVotesOmitted != before+3 || len(rec.RefusedVotes) != contracts.MaxRefusedVotes {
				t.Fatalf("refused history %d kept, %d omitted; want %d kept, %d omitted",
					len(rec.RefusedVotes), rec.RefusedVotesOmitted, contracts.MaxRefusedVotes, before+3)
			}
			if n := b.valueSize(t, id); n > b.lim.Record {
				t.Fatalf("record of %d bytes, over the budget of %d", n, b.lim.Record)
			} else {
				t.Logf("%s: final record %d bytes of %d", tc.name, n, b.lim.Record)
			}
		})
	}
}

// TestSizeBudgetRefusesOneByteOver sends requests and votes one byte over
// their limits: the request is dead-lettered with too_large and no record is
// created; the votes are refused as too_large on the record.
func TestSizeBudgetRefusesOneByteOver(t *testing.T) {
	b := newClockBus(t)
	reg := prometheus.NewRegistry()
	b.startArbiter(arbiter.Config{Registerer: reg})
	lim := contracts.LimitsFor(b.js.Conn().MaxPayload())
	bb := &budget{clockBus: b, lim: lim, resolver: b.srv.JetStreamAs(embedded.RoleResolver)}

	over := bb.maxRequest(t)
	over.ToolCall.Arguments = objectOf(t, "requested", lim.Arguments+1)
	over.ToolCall.ArgumentsSHA256, _ = contracts.ArgumentsSHA256(over.ToolCall.Arguments)
	if err := lim.CheckRequest(&over); err == nil {
		t.Fatal("a request one byte over the arguments limit passes the budget")
	}
	// Published as an orchestrator that skipped the check would.
	orch := b.srv.JetStreamAs(embedded.RoleOrchestrator)
	ack, err := events.Publish(context.Background(), orch, contracts.ToolRequestedSubject(over.Run.Agent), over, over.EventID, nil)
	if err != nil {
		t.Fatal(err)
	}
	dl := b.waitDeadLetter(t, contracts.StreamRequests, ack.Sequence)
	if reason := dl.Headers().Get(events.HeaderDeadLetterReason); !strings.Contains(reason, contracts.ReasonTooLarge) {
		t.Fatalf("dead letter reason %q, want %s", reason, contracts.ReasonTooLarge)
	}
	if _, err := b.kv.Get(context.Background(), over.EventID); err == nil {
		t.Fatal("a record was created for a request over the budget")
	}
	if n := counterValue(t, reg, "countersign_requests_refused_total", "reason", contracts.ReasonTooLarge); n != 1 {
		t.Fatalf("requests refused as too_large: %v, want 1", n)
	}

	req := bb.maxRequest(t)
	b.create(req)
	for _, tc := range []struct {
		name string
		v    contracts.Vote
	}{
		{"comment", bb.newVote("c", "alice", contracts.DecisionReject, func(v *contracts.Vote) {
			v.Comment = strings.Repeat("c", contracts.MaxCommentBytes+1)
		})},
		{"edit arguments", bb.newVote("e", "bob", contracts.DecisionEdit, func(v *contracts.Vote) {
			v.Arguments = objectOf(t, "bob", lim.Arguments+1)
		})},
	} {
		tc.v.EventID = req.EventID
		bb.vote(t, tc.v)
		rec := b.waitRecord(req.EventID, func(r *contracts.Record) bool {
			return slices_ContainsVote(r.RefusedVotes, tc.v.VoteID)
		})
		for _, rv := range rec.RefusedVotes {
			if rv.VoteID == tc.v.VoteID && rv.Reason != contracts.ReasonTooLarge {
				t.Errorf("%s: refused as %s, want %s", tc.name, rv.Reason, contracts.ReasonTooLarge)
			}
		}
		if len(rec.Votes) != 0 {
			t.Errorf("%s: a vote over its limit was counted", tc.name)
		}
	}
}

func slices_ContainsVote(rvs []contracts.RefusedVote, id string) bool {
	for _, rv := range rvs {
		if rv.VoteID == id {
			return true
		}
	}
	return false
}

// waitDeadLetter waits for the dead-letter copy of message seq of stream.
func (b *bus) waitDeadLetter(t *testing.T, stream string, seq uint64) jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, contracts.StreamDeadLetter, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.DeadLetterSubject(stream)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			t.Fatalf("no dead letter for %s message %d: %v", stream, seq, err)
		}
		if m.Headers().Get(events.HeaderDeadLetterSeq) == strconv.FormatUint(seq, 10) {
			return m
		}
	}
}

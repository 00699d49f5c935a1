package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

func TestApproveWakesLongPoll(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-approve", "deploy")
	polled := make(chan response, 1)
	go func() { polled <- e.call(t, "GET", "/v1/approvals/"+id+"?wait=30s", "agent", nil) }()
	ans := e.approve(t, "bob", id)
	if ans.Record.Status != contracts.StatusApproved || len(ans.Record.Votes) != 1 ||
		ans.Record.Votes[0].Approver != (contracts.Approver{ID: "bob", Via: contracts.ViaAPI}) {
		t.Fatalf("record after the vote: %+v", ans.Record)
	}
	r := <-polled
	if r.status != http.StatusOK {
		t.Fatalf("long poll: %d %s", r.status, r.body)
	}
	var got recordAnswer
	r.decode(t, &got)
	if got.Record.Status != contracts.StatusApproved || got.Revision != ans.Revision {
		t.Fatalf("long poll returned status %s revision %d, want approved at %d", got.Record.Status, got.Revision, ans.Revision)
	}
}

func TestVoteIsIdempotentByVoteID(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-idem", "deploy")
	body := map[string]any{"vote_id": "my-vote-1", "decision": "approve", "via": "cli"}
	first := e.vote(t, "bob", id, body)
	again := e.vote(t, "bob", id, body)
	if first.status != http.StatusOK || again.status != http.StatusOK {
		t.Fatalf("statuses %d, %d: %s", first.status, again.status, again.body)
	}
	var rec recordAnswer
	again.decode(t, &rec)
	if len(rec.Record.Votes) != 1 || rec.Record.Votes[0].VoteID != "my-vote-1" || rec.Record.Votes[0].Approver.Via != "cli" || len(rec.Record.RefusedVotes) != 0 {
		t.Fatalf("votes %+v refused %+v", rec.Record.Votes, rec.Record.RefusedVotes)
	}
}

func TestVoteRefusals(t *testing.T) {
	e := setup(t)
	pay := e.pendingApproval(t, "run-pay", "payments.send")

	t.Run("approver in body", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": "approve", "approver": map[string]string{"id": "alice"}}).
			wantError(t, http.StatusBadRequest, "approver_not_allowed", "approver")
	})
	t.Run("unknown decision", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": "maybe"}).wantError(t, http.StatusBadRequest, "invalid_field", "decision")
	})
	t.Run("bad via", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": "approve", "via": "slack"}).wantError(t, http.StatusBadRequest, "invalid_field", "via")
	})
	t.Run("wrong type", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": true}).wantError(t, http.StatusBadRequest, "invalid_json", "decision")
	})
	t.Run("unknown nested field", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "extra": 1}}).
			wantError(t, http.StatusBadRequest, "unknown_field", "answer.extra")
	})
	t.Run("agent role", func(t *testing.T) {
		e.vote(t, "agent", pay, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, "forbidden", "")
	})
	t.Run("not an approver", func(t *testing.T) {
		e.vote(t, "bob", pay, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, "not_an_approver", "")
	})
	t.Run("unknown event", func(t *testing.T) {
		e.vote(t, "bob", "no-such-event", map[string]any{"decision": "approve"}).wantError(t, http.StatusNotFound, "unknown_event", "")
		e.call(t, "GET", "/v1/approvals/no-such-event", "bob", nil).wantError(t, http.StatusNotFound, "unknown_event", "")
		e.call(t, "GET", "/v1/approvals/bad.id", "bob", nil).wantError(t, http.StatusBadRequest, "invalid_event_id", "event_id")
	})
	t.Run("decided", func(t *testing.T) {
		ans := e.approve(t, "alice", pay)
		if ans.Record.Status != contracts.StatusApproved {
			t.Fatalf("status %s", ans.Record.Status)
		}
		e.vote(t, "alice", pay, map[string]any{"decision": "reject"}).wantError(t, http.StatusConflict, "closed", "")
	})
	// Nothing was published for the unknown event.
	st, err := e.js.Stream(context.Background(), contracts.StreamResolutions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(contracts.ResolvedSubject("no-such-event")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[contracts.ResolvedSubject("no-such-event")]; n != 0 {
		t.Fatalf("%d votes published for an unknown event", n)
	}
}

func TestSelfApprovalRefused(t *testing.T) {
	e := setup(t)
	res := e.review(t, "", contracts.Run{ID: "run-self", Agent: "billing-bot", RequestedBy: "bob"}, toolCall{ID: "c", Name: "deploy"})
	e.vote(t, "bob", res[0].EventID, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, "self_approval", "")
}

func TestAuthentication(t *testing.T) {
	e := setup(t)
	r := e.call(t, "GET", "/v1/approvals", "", nil)
	r.wantError(t, http.StatusUnauthorized, "unauthenticated", "")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Fatal("no WWW-Authenticate header")
	}
	e.call(t, "GET", "/v1/approvals", "cs_not-a-real-token", nil).wantError(t, http.StatusUnauthorized, "unauthenticated", "")
	if r := e.call(t, "GET", "/v1/approvals", "admin", nil); r.status != http.StatusOK {
		t.Fatalf("admin: %d %s", r.status, r.body)
	}
	e.call(t, "POST", "/v1/reviews", "bob", reviewBody(contracts.Run{Agent: "a"}, toolCall{Name: "x"})).
		wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestClaimOnce(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-claim", "deploy")
	e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", nil).wantError(t, http.StatusConflict, "not_approved", "")
	e.approve(t, "bob", id)
	e.call(t, "POST", "/v1/approvals/"+id+"/claim", "bob", nil).wantError(t, http.StatusForbidden, "forbidden", "")
	r := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]string{"claim_id": "claim-1"})
	if r.status != http.StatusOK {
		t.Fatalf("first claim: %d %s", r.status, r.body)
	}
	var ans recordAnswer
	r.decode(t, &ans)
	if ans.Record.Claim == nil || ans.Record.Claim.ClaimID != "claim-1" {
		t.Fatalf("claim %+v", ans.Record.Claim)
	}
	if r := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]string{"claim_id": "claim-1"}); r.status != http.StatusOK {
		t.Fatalf("retried claim: %d %s", r.status, r.body)
	}
	second := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", nil)
	second.wantError(t, http.StatusConflict, "already_claimed", "")
	// The refusal says what is known: when, and by which claim; not that
	// the tool ran, which Countersign cannot know.
	var refused apiErr
	second.decode(t, &refused)
	at := ans.Record.Claim.At.UTC().Format(time.RFC3339)
	for _, want := range []string{"claimed at " + at, "by claim claim-1", "the outcome of the tool call is unknown to Countersign"} {
		if !strings.Contains(refused.Error.Message, want) {
			t.Errorf("claim refusal %q lacks %q", refused.Error.Message, want)
		}
	}
	// A re-review reports the call as already executed.
	res := e.review(t, "", contracts.Run{ID: "run-claim", Agent: "billing-bot"}, toolCall{ID: "c1", Name: "deploy", Arguments: []byte(`{"amount":5}`)})
	if res[0].Verdict != "already_executed" {
		t.Fatalf("%+v", res[0])
	}
}

func TestCancelThenVote(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-cancel", "deploy")
	r := e.call(t, "POST", "/v1/approvals/"+id+"/cancel", "bob", map[string]string{"reason": "not needed"})
	if r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	var ans recordAnswer
	r.decode(t, &ans)
	if ans.Record.Status != contracts.StatusCancelled {
		t.Fatalf("status %s", ans.Record.Status)
	}
	e.vote(t, "bob", id, map[string]any{"decision": "approve"}).wantError(t, http.StatusConflict, "closed", "")
	e.call(t, "POST", "/v1/approvals/"+id+"/cancel", "bob", nil).wantError(t, http.StatusConflict, "closed", "")
	// Only listed approvers (and the requester, the agent that submitted
	// it, admins) may cancel a request with an approver list.
	pay := e.pendingApproval(t, "run-cancel-pay", "payments.send")
	e.call(t, "POST", "/v1/approvals/"+pay+"/cancel", "bob", nil).wantError(t, http.StatusForbidden, contracts.ReasonNotPermitted, "")
	// The agent that submitted a request may cancel it (a client that
	// abandons the call).
	if r := e.call(t, "POST", "/v1/approvals/"+pay+"/cancel", "agent", nil); r.status != http.StatusOK {
		t.Fatalf("cancel by the submitting agent: %d %s", r.status, r.body)
	}
}

func TestExtend(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-extend", "deploy")
	before := e.call(t, "GET", "/v1/approvals/"+id, "bob", nil)
	var rec recordAnswer
	before.decode(t, &rec)
	r := e.call(t, "POST", "/v1/approvals/"+id+"/extend", "bob", map[string]string{"by": "2h"})
	if r.status != http.StatusOK {
		t.Fatalf("extend: %d %s", r.status, r.body)
	}
	var after recordAnswer
	r.decode(t, &after)
	if got := after.Record.ExpiresAt.Sub(rec.Record.ExpiresAt); got != 2*time.Hour {
		t.Fatalf("deadline moved by %s, want 2h", got)
	}
	// Attack: an extend that brings the deadline forward (on_timeout
	// would decide sooner than the rule says) is refused.
	sooner := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	e.call(t, "POST", "/v1/approvals/"+id+"/extend", "admin", map[string]string{"until": sooner.Format(time.RFC3339)}).
		wantError(t, http.StatusUnprocessableEntity, contracts.ReasonDeadlineNotLater, "until")
	until := after.Record.ExpiresAt.Add(3 * time.Hour).UTC().Truncate(time.Second)
	r = e.call(t, "POST", "/v1/approvals/"+id+"/extend", "admin", map[string]string{"until": until.Format(time.RFC3339)})
	if r.status != http.StatusOK {
		t.Fatalf("extend until: %d %s", r.status, r.body)
	}
	r.decode(t, &after)
	if !after.Record.ExpiresAt.Equal(until) {
		t.Fatalf("expires_at %s, want %s", after.Record.ExpiresAt, until)
	}
	e.call(t, "POST", "/v1/approvals/"+id+"/extend", "bob", map[string]string{}).wantError(t, http.StatusBadRequest, "invalid_field", "until")
	e.call(t, "POST", "/v1/approvals/"+id+"/extend", "bob", map[string]string{"by": "-1h"}).wantError(t, http.StatusBadRequest, "invalid_field", "by")
	e.call(t, "POST", "/v1/approvals/"+id+"/extend", "bob", map[string]string{"until": "tomorrow"}).wantError(t, http.StatusBadRequest, "invalid_field", "until")
}

func TestParallelVotesYieldOneOutcome(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-race", "deploy")
	ctx := context.Background()
	// Follow the decided subject before voting.
	cons, err := e.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{contracts.DecidedSubject(id)}})
	if err != nil {
		t.Fatal(err)
	}
	responses := make([]response, crowd)
	var wg sync.WaitGroup
	for i := range crowd {
		wg.Go(func() {
			responses[i] = e.vote(t, fmt.Sprintf("approver-%d", i), id, map[string]any{"decision": "approve"})
		})
	}
	wg.Wait()
	ok, closed := 0, 0
	for _, r := range responses {
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			var e apiErr
			r.decode(t, &e)
			if e.Error.Code != contracts.ReasonClosed {
				t.Fatalf("refusal code %q", e.Error.Code)
			}
			closed++
		default:
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	if ok != 1 || closed != crowd-1 {
		t.Fatalf("%d counted and %d closed, want 1 and %d", ok, closed, crowd-1)
	}
	if _, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no decided event: %v", err)
	}
	st, err := e.js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(contracts.DecidedSubject(id)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[contracts.DecidedSubject(id)]; n != 1 {
		t.Fatalf("%d decided events, want 1", n)
	}
}

func TestVoteIDOfAnotherApproverIsRefused(t *testing.T) {
	e := setup(t)
	id := e.pendingApproval(t, "run-vote-id", "deploy")
	if r := e.vote(t, "approver-1", id, map[string]any{"vote_id": "shared", "decision": "reject"}); r.status != http.StatusOK {
		t.Fatalf("first vote: %d %s", r.status, r.body)
	}
	e.vote(t, "approver-2", id, map[string]any{"vote_id": "shared", "decision": "approve"}).wantError(t, http.StatusConflict, "duplicate_vote", "")
}

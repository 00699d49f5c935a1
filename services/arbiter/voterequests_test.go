package arbiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// resolutionsLastSeq is the last sequence of HITL_RESOLUTIONS.
func (b *bus) resolutionsLastSeq() uint64 {
	b.t.Helper()
	s, err := b.js.Stream(context.Background(), contracts.StreamResolutions)
	if err != nil {
		b.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// sendVote sends v as a resolver does (events.VoteSender, the resolver
// role's grants) and reports whether the arbiter handled it by request.
func sendVote(t *testing.T, s *events.VoteSender, b *bus, v contracts.Vote) (asked bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	asked, err := s.Send(ctx, b.srv.JetStreamAs(embedded.RoleResolver), &v)
	if err != nil {
		t.Fatalf("send vote %s: %v", v.VoteID, err)
	}
	return asked
}

// A vote sent by request is applied as the same vote on the resolved
// subject would be: counted, refused with its reason, deciding once,
// announced, and nothing of it stored but the record and the
// announcements. Sent again by request or stored after all (a lost reply),
// it counts once.
func TestVoteRequestsApplyTheVoteWithoutStoringIt(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t, quorum(2)))
	storedBefore := b.resolutionsLastSeq()
	var s events.VoteSender

	if !sendVote(t, &s, b, vote("v-alice", "alice", contracts.DecisionApprove)) {
		t.Fatal("the vote was stored, not handled by request")
	}
	// Handled means applied: the record holds it when the reply comes.
	if rec, _ := b.record(eventID); len(rec.Votes) != 1 || rec.Votes[0].VoteID != "v-alice" || rec.Status != contracts.StatusPending {
		t.Fatalf("after alice: status %s, votes %+v", rec.Status, rec.Votes)
	}
	if !sendVote(t, &s, b, vote("v-dave", "dave", contracts.DecisionApprove)) {
		t.Fatal("the refused vote was not handled by request")
	}
	if rec, _ := b.record(eventID); len(rec.RefusedVotes) != 1 || rec.RefusedVotes[0].Reason != contracts.ReasonNotAnApprover {
		t.Fatalf("dave's vote: refused %+v", rec.RefusedVotes)
	}
	if !sendVote(t, &s, b, vote("v-bob", "bob", contracts.DecisionApprove)) {
		t.Fatal("the deciding vote was not handled by request")
	}
	rec, rev := b.record(eventID)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 2 {
		t.Fatalf("after bob: status %s, %d votes", rec.Status, len(rec.Votes))
	}
	// Again by request, then stored: nothing changes.
	if !sendVote(t, &s, b, vote("v-bob", "bob", contracts.DecisionApprove)) {
		t.Fatal("the repeated vote was not handled by request")
	}
	b.acks.wait(t, b.vote(vote("v-bob", "bob", contracts.DecisionApprove)), "+ACK")
	if rec, again := b.record(eventID); again != rev || len(rec.Votes) != 2 {
		t.Fatalf("the repeated vote wrote the record: revision %d → %d, %d votes", rev, again, len(rec.Votes))
	}
	if got := len(b.decidedEvents(eventID)); got != 1 {
		t.Fatalf("%d decided events, want 1", got)
	}
	var counted, refused int
	for _, ch := range b.changedEvents(eventID) {
		switch {
		case ch.Change == contracts.ChangeVoteCounted && ch.VoteID == "v-alice":
			counted++
		case ch.Change == contracts.ChangeVoteRefused && ch.VoteID == "v-dave" && ch.Reason == contracts.ReasonNotAnApprover:
			refused++
		}
	}
	if counted != 1 || refused != 1 {
		t.Fatalf("announced alice's vote %d times and dave's refusal %d times, want once each", counted, refused)
	}
	// Only the vote published on the resolved subject was stored.
	if got := b.resolutionsLastSeq() - storedBefore; got != 1 {
		t.Fatalf("%d messages stored on HITL_RESOLUTIONS, want 1 (the one published there)", got)
	}
}

// Requests that are not a well-formed vote on the approval their subject
// names are refused with the malformed code, and change nothing.
func TestMalformedVoteRequestsAreRefused(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t))
	_, revBefore := b.record(eventID)
	nc := b.srv.JetStreamAs(embedded.RoleResolver).Conn()
	encode := func(v contracts.Vote) []byte {
		data, err := contracts.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	reviewer := vote("v-r", "reviewer:scanner", contracts.DecisionApprove)
	reviewer.Approver.Via = contracts.ViaReviewer
	for name, req := range map[string]struct {
		subject string
		data    []byte
	}{
		"not JSON":            {contracts.VoteSubject(eventID), []byte("{")},
		"another approval":    {contracts.VoteSubject("not-" + eventID), encode(vote("v-1", "alice", contracts.DecisionApprove))},
		"no vote id":          {contracts.VoteSubject(eventID), encode(vote("", "alice", contracts.DecisionApprove))},
		"a reviewer's voice":  {contracts.VoteSubject(eventID), encode(reviewer)},
		"a command, not vote": {contracts.VoteSubject(eventID), encode(vote("v-2", "alice", contracts.DecisionApprove, func(v *contracts.Vote) { v.Spec = contracts.SpecCommand }))},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), busWait)
		reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: req.subject, Data: req.data})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if code := reply.Header.Get(contracts.HeaderVoteError); code != arbiter.ClaimErrorMalformed || reply.Header.Get(contracts.HeaderVoteErrorMessage) == "" {
			t.Errorf("%s: answered %q (%s), want %s with a message", name, code, reply.Header.Get(contracts.HeaderVoteErrorMessage), arbiter.ClaimErrorMalformed)
		}
	}
	if rec, rev := b.record(eventID); rev != revBefore || len(rec.Votes)+len(rec.RefusedVotes) != 0 {
		t.Fatalf("a refused request changed the record (revision %d → %d)", revBefore, rev)
	}
}

// A vote for a record that does not exist yet is answered retry, and the
// sender stores it on the resolved subject, where it waits for the record
// and is applied once the record is created.
func TestAVoteRequestForARecordNotYetCreatedIsStoredAndApplied(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 500})
	storedBefore := b.resolutionsLastSeq()
	var s events.VoteSender
	if sendVote(t, &s, b, vote("v-alice", "alice", contracts.DecisionApprove)) {
		t.Fatal("a vote for a missing record was answered handled")
	}
	if got := b.resolutionsLastSeq() - storedBefore; got != 1 {
		t.Fatalf("%d messages stored on HITL_RESOLUTIONS, want the vote", got)
	}
	b.create(request(t))
	if rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending }); rec.Status != contracts.StatusApproved {
		t.Fatalf("status %s, want approved by the stored vote", rec.Status)
	}
}

// Without an arbiter that answers vote requests (an earlier release, or
// none running), the sender stores the vote, and for a while stores the
// next ones at once without asking; the arbiter applies them when it runs.
func TestVotesAreStoredWhenNoArbiterAnswers(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	var asked atomic.Int32
	listener := b.srv.Connect()
	sub, err := listener.Subscribe(contracts.SubjectVotePrefix+">", func(*nats.Msg) { asked.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The server knows of the listener before the first request: without
	// the round trip, the request can find no responders and never reach it.
	if err := listener.Flush(); err != nil {
		t.Fatal(err)
	}
	storedBefore := b.resolutionsLastSeq()
	var s events.VoteSender
	// A listener that never answers: the request times out.
	for _, v := range []contracts.Vote{vote("v-alice", "alice", contracts.DecisionApprove), vote("v-bob", "bob", contracts.DecisionApprove)} {
		if sendVote(t, &s, b, v) {
			t.Fatalf("%s: handled without an arbiter", v.VoteID)
		}
	}
	if got := b.resolutionsLastSeq() - storedBefore; got != 2 {
		t.Fatalf("%d votes stored, want 2", got)
	}
	if got := asked.Load(); got != 1 {
		t.Fatalf("%d vote requests sent, want 1: after one went unanswered the sender stores at once", got)
	}
	b.startArbiter(arbiter.Config{UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 500})
	b.create(request(t))
	if rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending }); rec.Status != contracts.StatusApproved {
		t.Fatalf("status %s, want approved by the stored votes", rec.Status)
	}
}

package arbiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// An attacker who may ask the arbiter for something (any credential that
// publishes votes or claims) names, as the reply subject of the request,
// a subject only the arbiter may publish on: a JetStream API call that
// purges the records or deletes a stream, a record key, an announcement.
// Were the arbiter to answer there, its answer would be that call, made
// with the arbiter's rights. It answers on inboxes only: such a request is
// neither applied nor answered, whoever sent it, and counted.
func TestRequestsAreAnsweredOnlyOnInboxes(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{Registerer: reg})
	b.create(request(t))
	recBefore, revBefore := b.record(eventID)
	if recBefore.Status != contracts.StatusPending {
		t.Fatalf("record %s before the attack", recBefore.Status)
	}
	ctx := context.Background()
	watched := []string{events.RecordStream, contracts.StreamRequests, contracts.StreamResolutions, contracts.StreamEvents, audit.Stream}
	stored := func() map[string]uint64 {
		t.Helper()
		n := map[string]uint64{}
		for _, name := range watched {
			s, err := b.js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			n[name] = s.CachedInfo().State.Msgs
		}
		return n
	}
	before := stored()

	// What the attacker would have the arbiter publish on.
	targets := []string{
		"$JS.API.STREAM.PURGE." + events.RecordStream,
		"$JS.API.STREAM.DELETE." + contracts.StreamRequests,
		"$JS.API.STREAM.PURGE." + contracts.StreamResolutions,
		"$JS.API.STREAM.PURGE." + audit.Stream,
		"$JS.API.CONSUMER.DELETE." + contracts.StreamRequests + ".arbiter",
		events.RecordSubject(eventID),
		contracts.SubjectDecidedPrefix + eventID,
		audit.SubjectCheckpoint,
	}
	// An admin listens on each: no answer may arrive there.
	admin := b.srv.Connect()
	heard := make(chan string, 100)
	for _, subject := range targets {
		if _, err := admin.Subscribe(subject, func(m *nats.Msg) { heard <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}

	approve, err := contracts.Marshal(vote("v-forged", "alice", contracts.DecisionApprove))
	if err != nil {
		t.Fatal(err)
	}
	claim, err := contracts.Marshal(command("c-forged", contracts.CommandClaim, "billing", func(c *contracts.Command) { c.ClaimID = "claim-x" }))
	if err != nil {
		t.Fatal(err)
	}
	type sender struct {
		role    embedded.Role
		subject string
		data    []byte
	}
	senders := []sender{
		{embedded.RoleResolver, contracts.VoteSubject(eventID), approve},
		{embedded.RoleAPI, contracts.VoteSubject(eventID), approve},
		{embedded.RoleAPI, contracts.ClaimSubject(eventID), claim},
		{embedded.RoleOrchestrator, contracts.ClaimSubject(eventID), claim},
	}
	conns := map[embedded.Role]*nats.Conn{}
	sent := 0
	for _, s := range senders {
		nc := conns[s.role]
		if nc == nil {
			nc = b.srv.JetStreamAs(s.role).Conn()
			conns[s.role] = nc
		}
		for _, reply := range targets {
			if err := nc.PublishMsg(&nats.Msg{Subject: s.subject, Reply: reply, Data: s.data}); err != nil {
				t.Fatalf("%s: publish: %v", s.role, err)
			}
			sent++
		}
	}
	for role, nc := range conns {
		if err := nc.Flush(); err != nil {
			t.Fatalf("%s: flush: %v", role, err)
		}
	}
	// A request of each kind with an inbox for its answer, sent after the
	// attack: each subscription takes its messages in order, so once both
	// are answered every attacking request has been seen.
	for _, subject := range []string{contracts.VoteSubject(eventID), contracts.ClaimSubject(eventID)} {
		ctx, cancel := context.WithTimeout(ctx, busWait)
		answer, err := conns[embedded.RoleAPI].RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: []byte("{")})
		cancel()
		if err != nil {
			t.Fatalf("a request with an inbox on %s: %v", subject, err)
		}
		if code := answer.Header.Get(contracts.HeaderVoteError) + answer.Header.Get(contracts.HeaderClaimError); code != arbiter.ClaimErrorMalformed {
			t.Fatalf("a malformed request on %s answered %q", subject, code)
		}
	}

	votes := counterValue(t, reg, "countersign_requests_unanswerable_total", "kind", "vote")
	claims := counterValue(t, reg, "countersign_requests_unanswerable_total", "kind", "claim")
	if votes+claims != float64(sent) || votes != float64(2*len(targets)) {
		t.Errorf("counted %v votes and %v claims as unanswerable, want %d of %d", votes, claims, 2*len(targets), sent)
	}
	// The admin's subscriptions see whatever the server routed before the
	// flush's answer.
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case subject := <-heard:
		t.Errorf("the arbiter answered on %s", subject)
	default:
	}
	if got := stored(); len(got) != len(before) {
		t.Errorf("streams %v, before %v", got, before)
	} else {
		for name, n := range before {
			// The audit log may still be appending the record's creation
			// (group commit); an answer on its checkpoint subject would have
			// been heard above.
			if got[name] != n && (name != audit.Stream || got[name] < n) {
				t.Errorf("%s holds %d messages, before the attack %d", name, got[name], n)
			}
		}
	}
	if rec, rev := b.record(eventID); rev != revBefore || rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || rec.Claim != nil {
		t.Errorf("the record after the attack: %s, revision %d (before %d), votes %v, claim %+v", rec.Status, rev, revBefore, rec.Votes, rec.Claim)
	}
}

// A credential that may ask the server anything names the key of an
// approval that does not exist yet (event ids are derived from the run and
// tool call ids, so they can be known before the request) as the reply of
// a request: the server stores its answer there, the one message a key
// takes without a roll-up. The arbiter replaces it with the record when the
// request comes, and the approval is decided as any other.
func TestAnAnswerStoredUnderAKeyBeforeItsRecordIsReplacedByTheRecord(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	resolver := b.srv.JetStreamAs(embedded.RoleResolver).Conn()
	if err := resolver.PublishMsg(&nats.Msg{Subject: "$JS.API.INFO", Reply: events.RecordSubject(eventID)}); err != nil {
		t.Fatal(err)
	}
	junk := b.waitEntry(eventID)
	var rec contracts.Record
	if err := contracts.DecodeRecord(eventID, junk, &rec); !errors.Is(err, contracts.ErrNotThisRecord) {
		t.Fatalf("the answer stored under the key (%s) decodes as its record: %v", junk, err)
	}
	b.create(request(t))
	created := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Spec == contracts.SpecRecord })
	if created.Status != contracts.StatusPending || created.Request.EventID != eventID {
		t.Fatalf("record %+v", created)
	}
	b.acks.wait(t, b.vote(vote("v-alice", "alice", contracts.DecisionApprove)), "+ACK")
	b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })
}

// waitEntry blocks until key has a value in the approvals bucket and
// returns it.
func (b *bus) waitEntry(key string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	w, err := b.kv.Watch(ctx, key)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				return e.Value()
			}
		case <-ctx.Done():
			b.t.Fatalf("nothing was stored under %s", key)
		}
	}
}

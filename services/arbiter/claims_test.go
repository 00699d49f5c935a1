package arbiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// A claim asked for by request is applied as the same command on the
// command subject would be: accepted once, refused for any other claim,
// announced, and nothing of it stored but the record and the
// announcement. Requests that are not claims for the approval they name
// are refused with a code, and change nothing.
func TestClaimRequestsApplyTheCommandWithoutStoringIt(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t))
	b.acks.wait(t, b.vote(vote("v-alice", "alice", contracts.DecisionApprove)), "+ACK")
	b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })

	// As a runner connects: the orchestrator role's grants.
	nc := b.srv.JetStreamAs(embedded.RoleOrchestrator).Conn()
	ask := func(t *testing.T, subject string, data []byte) (code string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), busWait)
		defer cancel()
		reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data})
		if err != nil {
			t.Fatalf("request on %s: %v", subject, err)
		}
		if code := reply.Header.Get(contracts.HeaderClaimError); code != "" {
			if reply.Header.Get(contracts.HeaderClaimErrorMessage) == "" {
				t.Errorf("error %s without a message", code)
			}
			return code
		}
		return ""
	}
	encode := func(c contracts.Command) []byte {
		data, err := contracts.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	claim := func(cmdID, by, claimID string) contracts.Command {
		return command(cmdID, contracts.CommandClaim, by, func(c *contracts.Command) { c.ClaimID = claimID })
	}
	resolutions := func() uint64 {
		s, err := b.js.Stream(context.Background(), contracts.StreamResolutions)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.LastSeq
	}
	storedBefore := resolutions()
	_, revBefore := b.record(eventID)

	// Not claims, or not for the approval the subject names: refused, the
	// record untouched.
	for name, req := range map[string]struct {
		subject string
		data    []byte
	}{
		"not JSON":         {contracts.ClaimSubject(eventID), []byte("{")},
		"a cancel":         {contracts.ClaimSubject(eventID), encode(command("x1", contracts.CommandCancel, "ops"))},
		"another approval": {contracts.ClaimSubject("not-" + eventID), encode(claim("x2", "billing", "claim-x"))},
		"no claim id":      {contracts.ClaimSubject(eventID), encode(claim("x4", "billing", ""))},
	} {
		if code := ask(t, req.subject, req.data); code != arbiter.ClaimErrorMalformed {
			t.Errorf("%s: answered %q, want %s", name, code, arbiter.ClaimErrorMalformed)
		}
	}
	if _, rev := b.record(eventID); rev != revBefore {
		t.Fatalf("a refused request wrote the record (revision %d → %d)", revBefore, rev)
	}

	// The claim: accepted, announced once, no command stored.
	if code := ask(t, contracts.ClaimSubject(eventID), encode(claim("c-1", "billing", "claim-1"))); code != "" {
		t.Fatalf("claim answered %s", code)
	}
	rec, rev := b.record(eventID)
	if rec.Claim == nil || rec.Claim.ClaimID != "claim-1" || rev != revBefore+1 {
		t.Fatalf("after the claim: claim %+v, revision %d (was %d)", rec.Claim, rev, revBefore)
	}
	// Asked again (a lost reply), then published on the command subject
	// (the runner's way when a reply does not come): still one claim, one
	// announcement.
	if code := ask(t, contracts.ClaimSubject(eventID), encode(claim("c-1", "billing", "claim-1"))); code != "" {
		t.Fatalf("the same claim again answered %s", code)
	}
	b.acks.wait(t, b.command(claim("c-1", "billing", "claim-1")), "+ACK")
	// Another claim: refused (already claimed), announced as such.
	if code := ask(t, contracts.ClaimSubject(eventID), encode(claim("c-2", "runner-2", "claim-2"))); code != "" {
		t.Fatalf("second claim answered %s", code)
	}
	var claimed, refused int
	for _, ch := range b.changedEvents(eventID) {
		switch ch.Change {
		case contracts.ChangeClaimed:
			claimed++
			if ch.By != "billing" {
				t.Errorf("claimed by %q", ch.By)
			}
		case contracts.ChangeClaimRefused:
			refused++
			if ch.Reason != contracts.ReasonAlreadyClaimed || ch.By != "runner-2" {
				t.Errorf("refusal %+v", ch)
			}
		}
	}
	if claimed != 1 || refused != 1 {
		t.Fatalf("announced %d claimed and %d refused claims, want 1 and 1", claimed, refused)
	}
	if rec, _ := b.record(eventID); rec.Claim == nil || rec.Claim.ClaimID != "claim-1" {
		t.Fatalf("final claim %+v", rec.Claim)
	}
	// Only the command published on the command subject was stored.
	if got := resolutions() - storedBefore; got != 1 {
		t.Fatalf("%d messages stored on HITL_RESOLUTIONS, want 1 (the one published there)", got)
	}
}

// A claim request for a record that does not exist yet is answered retry:
// the runner then publishes it on the command subject, which waits for
// the record.
func TestClaimRequestForAnUnknownRecordAsksToRetry(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{UnknownEventDelay: 10 * time.Millisecond, UnknownEventAttempts: 2})
	b.create(request(t)) // the arbiter is at work
	const other = "0193b3c4-0000-7000-8000-000000000001"
	nc := b.srv.JetStreamAs(embedded.RoleOrchestrator).Conn()
	data, err := contracts.Marshal(command("c-1", contracts.CommandClaim, "billing", func(c *contracts.Command) {
		c.ClaimID, c.EventID = "claim-1", other
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: contracts.ClaimSubject(other), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(contracts.HeaderClaimError); code != arbiter.ClaimErrorRetry {
		t.Fatalf("answered %q, want %s", code, arbiter.ClaimErrorRetry)
	}
}

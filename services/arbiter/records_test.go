package arbiter_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/services/arbiter"
)

// countRecordReads counts the reads of the approvals bucket's records that
// any client sends (direct gets: the bus's bucket has one replica).
func countRecordReads(t *testing.T, b *bus) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	nc := b.srv.Connect()
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.KV_"+contracts.BucketApprovals+".>", func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}

// The arbiter applies a vote and a claim to the record it wrote itself
// without reading the bucket: one decode per revision, none per message.
func TestArbiterAppliesToTheRecordItWrote(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	timerAcks := sniffAcksOf(t, b.srv.Connect(), contracts.StreamTimers, arbiter.DurableTimers)
	b.create(request(t))
	// The expiry, due by the server's clock, fires at once and reads the
	// record (the arbiter's clock says it is early): wait until that is
	// done, then count.
	md, err := b.waitMessage(contracts.StreamTimers, contracts.TimerFireSubject(eventID, contracts.TimerExpire)).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	timerAcks.wait(t, md.Sequence.Stream, "-NAK")
	reads := countRecordReads(t, b)
	b.acks.wait(t, b.vote(vote("v-alice", "alice", contracts.DecisionApprove)), "+ACK")
	claim := command("c1", contracts.CommandClaim, "billing", func(c *contracts.Command) { c.ClaimID = "claim-1" })
	b.acks.wait(t, b.command(claim), "+ACK")
	rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Claim != nil })
	if rec.Status != contracts.StatusApproved || rec.Claim.ClaimID != "claim-1" {
		t.Fatalf("record %s, claim %+v", rec.Status, rec.Claim)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the arbiter read the record %d times, want 0: it wrote every revision itself", n)
	}
}

// writeAsOtherReplica applies v to the current record and writes it with
// compare-and-set, as another arbiter replica would, behind this one's back.
func writeAsOtherReplica(t *testing.T, b *bus, v contracts.Vote) {
	t.Helper()
	rec, rev := b.record(eventID)
	res := approval.ApplyVote(rec, v, busNow())
	if !res.Changed {
		t.Fatalf("vote %s changes nothing", v.VoteID)
	}
	data, err := json.Marshal(res.Record)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecordWriter(b.js).Update(context.Background(), eventID, data, nil, rev); err != nil {
		t.Fatal(err)
	}
}

// A record another replica wrote after this arbiter's last write loses
// nothing: the write from the stale record fails its compare-and-set and
// the vote is applied again to the record read from the bucket.
func TestArbiterStaleRecordLosesNoVote(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t, noVeto))
	writeAsOtherReplica(t, b, vote("v-bob", "bob", contracts.DecisionReject, comment("not yet")))
	b.acks.wait(t, b.vote(vote("v-alice", "alice", contracts.DecisionApprove)), "+ACK")
	rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending })
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 2 {
		t.Fatalf("status %s, votes %+v: want approved with bob's and alice's votes", rec.Status, rec.Votes)
	}
}

// A refusal rests on the current record, not on the one this arbiter wrote
// last: a claim of an approval another replica decided is accepted.
func TestArbiterStaleRecordRefusesNothing(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t))
	writeAsOtherReplica(t, b, vote("v-alice", "alice", contracts.DecisionApprove))
	claim := command("c1", contracts.CommandClaim, "billing", func(c *contracts.Command) { c.ClaimID = "claim-1" })
	b.acks.wait(t, b.command(claim), "+ACK")
	rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Claim != nil })
	if rec.Status != contracts.StatusApproved || rec.Claim.ClaimID != "claim-1" {
		t.Fatalf("record %s, claim %+v: want the claim accepted", rec.Status, rec.Claim)
	}
	for _, c := range b.changedEvents(eventID) {
		if c.Change == contracts.ChangeClaimRefused {
			t.Fatalf("claim refused from a stale record: %+v", c)
		}
	}
}

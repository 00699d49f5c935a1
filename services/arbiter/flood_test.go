package arbiter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// TestFloodOfBadVotesDoesNotBlockOtherApprovals has one resolver publish
// 1,100 votes that can never count (comments over the limit) on one approval:
// another approval is still decided within seconds, and every bad vote is
// refused on its first delivery, never redelivered.
func TestFloodOfBadVotesDoesNotBlockOtherApprovals(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	resolver := b.srv.JetStreamAs(embedded.RoleResolver)

	flooded := request(t, func(r *contracts.ApprovalRequested) { r.EventID = "flooded-" + uuid.NewString() })
	other := request(t, func(r *contracts.ApprovalRequested) { r.EventID = "other-" + uuid.NewString() })
	b.create(flooded)
	b.create(other)

	const n = 1100
	huge := strings.Repeat("x", contracts.MaxCommentBytes+1)
	first, last := uint64(0), uint64(0)
	for i := range n {
		v := vote(fmt.Sprintf("flood-%04d", i), "alice", contracts.DecisionApprove, comment(huge))
		v.EventID = flooded.EventID
		data, err := contracts.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := resolver.PublishAsync(contracts.ResolvedSubject(v.EventID), data, jetstream.WithMsgID(v.VoteID))
		if err != nil {
			t.Fatal(err)
		}
		if i == n-1 {
			select {
			case pa := <-ack.Ok():
				last = pa.Sequence
			case err := <-ack.Err():
				t.Fatal(err)
			}
		}
	}
	select {
	case <-resolver.PublishAsyncComplete():
	case <-time.After(busWait):
		t.Fatal("flood not published")
	}
	first = last - n + 1

	// A vote on the other approval, published after the whole flood.
	good := vote("good-1", "bob", contracts.DecisionApprove)
	good.EventID = other.EventID
	data, _ := contracts.Marshal(good)
	if _, err := events.PublishRaw(context.Background(), resolver, contracts.ResolvedSubject(other.EventID), data, good.VoteID, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !waitStatus(ctx, b, other.EventID, contracts.StatusApproved) {
		t.Fatal("the other approval was not decided within 10 s of a flood on another one")
	}
	t.Logf("the other approval was decided %s after its vote", time.Since(start).Round(time.Millisecond))

	// Every bad vote is refused once, on its first delivery.
	rec := b.waitRecord(flooded.EventID, func(r *contracts.Record) bool {
		return len(r.RefusedVotes)+r.RefusedVotesOmitted == n
	})
	if len(rec.Votes) != 0 || rec.Status != contracts.StatusPending {
		t.Fatalf("flooded record: %d votes counted, status %s", len(rec.Votes), rec.Status)
	}
	for _, rv := range rec.RefusedVotes {
		if rv.Reason != contracts.ReasonTooLarge {
			t.Fatalf("bad vote %s refused as %s, want %s", rv.VoteID, rv.Reason, contracts.ReasonTooLarge)
		}
	}
	for seq := first; seq <= last; seq++ {
		for _, a := range b.acks.wait(t, seq, "+ACK") {
			if a.delivered != 1 || a.kind != "+ACK" {
				t.Fatalf("bad vote %d: %+v, want one delivery, acknowledged", seq, a)
			}
		}
	}
}

// waitStatus waits on a KV watch until the record of id has status, or ctx ends.
func waitStatus(ctx context.Context, b *bus, id, status string) bool {
	w, err := b.kv.Watch(ctx, id)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var rec contracts.Record
			if err := json.Unmarshal(e.Value(), &rec); err == nil && rec.Status == status {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

// TestBusCommentLimit: a resolver's vote with a 100 KB comment is refused
// as too_large and recorded so; one with a 16 KiB comment counts.
func TestBusCommentLimit(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	resolver := b.srv.JetStreamAs(embedded.RoleResolver)
	req := request(t, quorum(2))
	b.create(req)
	publish := func(v contracts.Vote) {
		data, err := contracts.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := events.PublishRaw(context.Background(), resolver, contracts.ResolvedSubject(v.EventID), data, v.VoteID, nil); err != nil {
			t.Fatal(err)
		}
	}
	publish(vote("big", "alice", contracts.DecisionApprove, comment(strings.Repeat("b", 100_000))))
	rec := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return len(r.RefusedVotes) == 1 })
	if rv := rec.RefusedVotes[0]; rv.VoteID != "big" || rv.Reason != contracts.ReasonTooLarge || !strings.HasPrefix(rv.Detail, "comment") {
		t.Fatalf("refused vote %+v, want big refused as too_large with a detail on comment", rv)
	}
	if len(rec.Votes) != 0 {
		t.Fatal("the 100 KB comment's vote was counted")
	}
	publish(vote("max", "bob", contracts.DecisionApprove, comment(strings.Repeat("m", contracts.MaxCommentBytes))))
	rec = b.waitRecord(req.EventID, func(r *contracts.Record) bool { return len(r.Votes) == 1 })
	if rec.Votes[0].VoteID != "max" || len(rec.Votes[0].Comment) != 16<<10 {
		t.Fatalf("counted %+v, want the 16 KiB comment's vote", rec.Votes[0].VoteID)
	}
}

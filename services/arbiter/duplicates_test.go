package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/arbiter"
)

// deadLetters reads the dead letters of stream, from the first.
func (b *bus) deadLetters(stream string) jetstream.Consumer {
	b.t.Helper()
	c, err := b.js.OrderedConsumer(context.Background(), contracts.StreamDeadLetter, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.DeadLetterSubject(stream)},
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// nextDeadLetter waits for the dead letter of the message with stream
// sequence seq and returns its reason.
func nextDeadLetter(t *testing.T, c jetstream.Consumer, seq uint64) string {
	t.Helper()
	for {
		m, err := c.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			t.Fatalf("waiting for the dead letter of message %d: %v", seq, err)
		}
		if m.Headers().Get(events.HeaderDeadLetterSeq) == strconv.FormatUint(seq, 10) {
			return m.Headers().Get(events.HeaderDeadLetterReason)
		}
	}
}

// A message that names a key twice is ambiguous, so it is never applied:
// the arbiter dead-letters it, naming the key, and goes on.
func TestArbiterDeadLettersDuplicateKeys(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	req := request(t)
	b.create(req)
	ctx := context.Background()
	resolver := b.srv.JetStreamAs(embedded.RoleResolver)
	votes := b.deadLetters(contracts.StreamResolutions)

	for _, tc := range []struct {
		name, data, key string
	}{
		{"two decisions", `{"spec":"` + contracts.SpecVote + `","vote_id":"v-dup","event_id":"` + eventID +
			`","decision":"reject","approver":{"id":"alice","via":"nats"},"comment":"wrong account","decision":"approve"}`, "decision"},
		{"two approvers, one escaped", `{"spec":"` + contracts.SpecVote + `","vote_id":"v-dup2","event_id":"` + eventID +
			`","decision":"approve","approver":{"id":"erin","via":"nats","\u0069d":"alice"}}`, "approver.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, err := events.PublishRaw(ctx, resolver, contracts.ResolvedSubject(eventID), []byte(tc.data), uuid.NewString(), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range b.acks.wait(t, ack.Sequence, "+TERM") {
				if a.kind != "+TERM" || a.delivered != 1 {
					t.Errorf("acknowledgement %+v, want one +TERM on the first delivery", a)
				}
			}
			if reason := nextDeadLetter(t, votes, ack.Sequence); !strings.Contains(reason, `duplicate key "`+tc.key+`"`) {
				t.Errorf("dead letter reason %q does not name %q", reason, tc.key)
			}
		})
	}

	// A request whose on_timeout is given twice makes no record.
	orch := b.srv.JetStreamAs(embedded.RoleOrchestrator)
	other := request(t, func(r *contracts.ApprovalRequested) { r.EventID = uuid.NewString() })
	data, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"on_timeout":"reject"`, `"on_timeout":"reject","on_timeout":"approve"`, 1))
	ack, err := events.PublishRaw(ctx, orch, contracts.ToolRequestedSubject(other.Run.Agent), data, other.EventID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reason := nextDeadLetter(t, b.deadLetters(contracts.StreamRequests), ack.Sequence); !strings.Contains(reason, `duplicate key "on_timeout"`) {
		t.Errorf("request dead letter reason %q", reason)
	}
	if _, err := b.kv.Get(ctx, other.EventID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a record for the refused request: %v", err)
	}

	// Neither vote counted or was refused into the record; the next one counts.
	good := vote("v-good", "bob", contracts.DecisionApprove)
	b.vote(good)
	rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Terminal() })
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].VoteID != good.VoteID || len(rec.RefusedVotes) != 0 {
		t.Fatalf("record: status %s, votes %+v, refused %+v", rec.Status, rec.Votes, rec.RefusedVotes)
	}
}

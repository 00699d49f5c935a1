package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

func TestClassify(t *testing.T) {
	var syn error
	if err := json.Unmarshal([]byte("{"), new(any)); err != nil {
		syn = err
	}
	var typ error
	if err := json.Unmarshal([]byte(`{"vote_id":7}`), new(contracts.Vote)); err != nil {
		typ = err
	}
	cases := []struct {
		name string
		err  error
		want events.Disposition
	}{
		{"nil", nil, events.Ack},
		{"detached", fmt.Errorf("handed on: %w", events.ErrDetached), events.Detached},
		{"poison", events.Poison(errors.New("bad")), events.Permanent},
		{"json syntax", fmt.Errorf("decode vote: %w", syn), events.Permanent},
		{"json type", fmt.Errorf("decode vote: %w", typ), events.Permanent},
		{"contract violation", &contracts.FieldError{Code: contracts.ReasonMalformed, Field: "decision", Message: "unknown"}, events.Permanent},
		{"too large", fmt.Errorf("record: %w", contracts.ErrTooLarge), events.Permanent},
		{"max payload", fmt.Errorf("update record: %w", nats.ErrMaxPayload), events.Permanent},
		{"stream message limit", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}, events.Permanent},
		{"poison wrapping a timeout", events.Poison(context.DeadlineExceeded), events.Permanent},
		{"retry", events.Retry(time.Second, errors.New("unknown_event")), events.RetryAfter},
		{"timeout", fmt.Errorf("get: %w", nats.ErrTimeout), events.Transient},
		{"deadline", context.DeadlineExceeded, events.Transient},
		{"no responders", fmt.Errorf("publish: %w", nats.ErrNoResponders), events.Transient},
		{"cas conflict", fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), events.Transient},
		{"wrong last sequence", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, events.Transient},
		{"no stream response (leader change)", jetstream.ErrNoStreamResponse, events.Transient},
		{"anything else", errors.New("connection reset"), events.Transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

// TestClassifyRealMaxPayload: the error a publish over the server's max
// payload really returns is permanent.
func TestClassifyRealMaxPayload(t *testing.T) {
	e := newEnv(t)
	big := make([]byte, e.nc.MaxPayload()+1)
	_, err := events.PublishRaw(testContext(t), e.js, contracts.ToolRequestedSubject("a"), big, "", nil)
	if err == nil {
		t.Fatal("a publish over the max payload succeeded")
	}
	if got := events.Classify(err); got != events.Permanent {
		t.Fatalf("Classify(%v) = %s, want permanent", err, got)
	}
}

// TestPermanentErrorIsDeadLetteredAtOnce: a handler error wrapping
// nats.ErrMaxPayload (not made by Poison) is dead-lettered on its first
// delivery, with its reason, and never redelivered.
func TestPermanentErrorIsDeadLetteredAtOnce(t *testing.T) {
	e := newEnv(t)
	acks := e.watchAcks(t, contracts.StreamRequests, "perm")
	var calls atomic.Int32
	e.consume(t, e.js, events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: "perm", MaxDeliver: 50},
		func(context.Context, jetstream.Msg) error {
			calls.Add(1)
			return fmt.Errorf("write record: %w", nats.ErrMaxPayload)
		})
	seq := e.publish(t, "a", []byte(`{}`), nil)
	a := recv(t, acks, "the message's acknowledgement")
	if a.kind() != "+TERM" || a.streamSeq != seq || a.delivered != 1 {
		t.Fatalf("got %+v, want a Term on the first delivery of %d", a, seq)
	}
	dl, err := e.js.Stream(testContext(t), contracts.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dl.GetLastMsgForSubject(testContext(t), contracts.DeadLetterSubject(contracts.StreamRequests))
	if err != nil {
		t.Fatal(err)
	}
	if reason := m.Header.Get(events.HeaderDeadLetterReason); !strings.Contains(reason, "maximum payload") {
		t.Fatalf("dead letter reason %q", reason)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handled %d times, want once", n)
	}
}

package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/eventstest"
)

// waitFor bounds every wait on a signal, so a broken loop fails the test
// instead of hanging it.
const waitFor = 10 * time.Second

// env is one embedded server with the contract provisioned.
type env struct {
	srv *eventstest.Server
	js  jetstream.JetStream
	nc  *nats.Conn
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := eventstest.NewServer(t)
	nc := srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	srv.Provision(js)
	return &env{srv: srv, js: js, nc: nc}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// publish stores data on an agent's request subject and returns its stream
// sequence.
func (e *env) publish(t *testing.T, agent string, data []byte, hdr nats.Header) uint64 {
	t.Helper()
	ack, err := events.PublishRaw(testContext(t), e.js, contracts.ToolRequestedSubject(agent), data, "", hdr)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return ack.Sequence
}

// consume runs events.Consume in the background until the test ends and
// checks that it returns cleanly.
func (e *env) consume(t *testing.T, js jetstream.JetStream, cfg events.ConsumerConfig, h events.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- events.Consume(ctx, js, cfg, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Consume returned %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Consume did not return after its context ended")
		}
	})
}

// ackEvent is one acknowledgement a consume loop sent to the server,
// observed on the ack subject itself.
type ackEvent struct {
	streamSeq uint64
	delivered uint64
	body      string
}

func (a ackEvent) kind() string {
	kind, _, _ := strings.Cut(a.body, " ")
	return kind
}

// watchAcks subscribes to the acknowledgements of durable on stream. Acks
// from one connection arrive in the order they were sent.
func (e *env) watchAcks(t *testing.T, stream, durable string) <-chan ackEvent {
	t.Helper()
	ch := make(chan ackEvent, 1024)
	sub, err := e.nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		tok := strings.Split(m.Subject, ".")
		// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>,
		// or with <domain>.<account hash> after ACK.
		off := 2
		if len(tok) >= 11 {
			off = 4
		}
		if len(tok) < off+5 || tok[off] != stream || tok[off+1] != durable {
			return
		}
		delivered, _ := strconv.ParseUint(tok[off+2], 10, 64)
		seq, _ := strconv.ParseUint(tok[off+3], 10, 64)
		ch <- ackEvent{streamSeq: seq, delivered: delivered, body: string(m.Data)}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// delivery is one call of a handler.
type delivery struct {
	seq       uint64
	delivered uint64
	data      []byte
	at        time.Time
}

func deliveryOf(t *testing.T, m jetstream.Msg) delivery {
	md, err := m.Metadata()
	if err != nil {
		t.Errorf("metadata: %v", err)
		return delivery{at: time.Now()}
	}
	return delivery{seq: md.Sequence.Stream, delivered: md.NumDelivered, data: m.Data(), at: time.Now()}
}

func consumerInfo(t *testing.T, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testContext(t)
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// settledInfo returns the consumer's info once ok holds, or the last one
// read after a few seconds. An ack seen on the wire may not be applied by
// the server yet when the test reads the consumer; nothing signals that.
func settledInfo(t *testing.T, js jetstream.JetStream, stream, durable string, ok func(*jetstream.ConsumerInfo) bool) *jetstream.ConsumerInfo {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info := consumerInfo(t, js, stream, durable)
		if ok(info) || time.Now().After(deadline) {
			return info
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertSettled checks with the server that every delivered message of the
// consumer was settled and none was ever redelivered.
func assertSettled(t *testing.T, js jetstream.JetStream, stream, durable string, delivered uint64) {
	t.Helper()
	info := settledInfo(t, js, stream, durable, func(i *jetstream.ConsumerInfo) bool {
		return i.NumAckPending == 0 && i.NumPending == 0 && i.Delivered.Consumer == delivered
	})
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("consumer has %d unacknowledged and %d undelivered messages, want none", info.NumAckPending, info.NumPending)
	}
	if info.Delivered.Consumer != delivered {
		t.Errorf("consumer delivered %d times, want %d", info.Delivered.Consumer, delivered)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("consumer has %d redelivered messages pending, want 0", info.NumRedelivered)
	}
}

// deadLetter reads the newest dead-lettered copy of a message from stream.
func (e *env) deadLetter(t *testing.T, stream string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := testContext(t)
	s, err := e.js.Stream(ctx, contracts.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, contracts.DeadLetterSubject(stream))
	if err != nil {
		t.Fatalf("read dead letter of %s: %v", stream, err)
	}
	return m
}

func TestConsumeAcksOnNil(t *testing.T) {
	e := newEnv(t)
	const durable = "test-ack"
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	handled := make(chan delivery, 16)
	e.consume(t, e.js, events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: durable},
		func(_ context.Context, m jetstream.Msg) error {
			handled <- deliveryOf(t, m)
			return nil
		})

	first := e.publish(t, "billing", []byte(`{"n":1}`), nil)
	d := recv(t, handled, "the first message")
	if d.seq != first || d.delivered != 1 || string(d.data) != `{"n":1}` {
		t.Fatalf("handled %+v, want stream seq %d on its first delivery", d, first)
	}
	if a := recv(t, acks, "the first ack"); a.streamSeq != first || a.body != "+ACK" {
		t.Fatalf("first settlement = %+v, want +ACK of seq %d", a, first)
	}
	// A second message settles after everything sent for the first one.
	second := e.publish(t, "billing", []byte(`{"n":2}`), nil)
	if d := recv(t, handled, "the second message"); d.seq != second || d.delivered != 1 {
		t.Fatalf("handled %+v, want stream seq %d on its first delivery", d, second)
	}
	if a := recv(t, acks, "the second ack"); a.streamSeq != second || a.body != "+ACK" {
		t.Fatalf("second settlement = %+v, want +ACK of seq %d: the first message was settled twice", a, second)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, 2)
	if n := len(handled); n != 0 {
		t.Errorf("%d extra deliveries", n)
	}
}

func TestConsumeDetachedMessagesAreSettledByTheHandlersWork(t *testing.T) {
	e := newEnv(t)
	const durable = "test-detached"
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	held := make(chan jetstream.Msg, 16)
	e.consume(t, e.js, events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: durable},
		func(_ context.Context, m jetstream.Msg) error {
			held <- m
			return events.ErrDetached
		})
	first := e.publish(t, "billing", []byte(`{"n":1}`), nil)
	m1 := recv(t, held, "the first message")
	// With Concurrency 1 the loop takes the next message while the first
	// is still held: detaching freed the slot, and nothing settled it.
	second := e.publish(t, "billing", []byte(`{"n":2}`), nil)
	m2 := recv(t, held, "the second message while the first is held")
	if deliveryOf(t, m2).seq != second {
		t.Fatalf("second message has seq %d, want %d", deliveryOf(t, m2).seq, second)
	}
	if err := m2.Ack(); err != nil {
		t.Fatal(err)
	}
	if a := recv(t, acks, "the second ack"); a.streamSeq != second || a.body != "+ACK" {
		t.Fatalf("first settlement = %+v, want the work's +ACK of seq %d (the loop must not settle a detached message)", a, second)
	}
	if err := m1.Ack(); err != nil {
		t.Fatal(err)
	}
	if a := recv(t, acks, "the first ack"); a.streamSeq != first || a.body != "+ACK" {
		t.Fatalf("settlement = %+v, want +ACK of seq %d", a, first)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, 2)
}

func TestConsumeRetryRedeliversAfterDelay(t *testing.T) {
	e := newEnv(t)
	const (
		durable = "test-retry"
		delay   = 150 * time.Millisecond
	)
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	handled := make(chan delivery, 16)
	var returned atomic.Int64
	e.consume(t, e.js, events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: durable},
		func(_ context.Context, m jetstream.Msg) error {
			d := deliveryOf(t, m)
			handled <- d
			if d.delivered == 1 {
				returned.Store(time.Now().UnixNano())
				return events.Retry(delay, errors.New("record not there yet"))
			}
			return nil
		})

	seq := e.publish(t, "billing", []byte(`{}`), nil)
	recv(t, handled, "the first delivery")
	nak := recv(t, acks, "the nak")
	if nak.streamSeq != seq || nak.kind() != "-NAK" || nakDelay(t, nak) != delay {
		t.Fatalf("first settlement = %+v, want -NAK with delay %s", nak, delay)
	}
	again := recv(t, handled, "the redelivery")
	if again.seq != seq || again.delivered != 2 {
		t.Fatalf("redelivery = %+v, want seq %d delivered twice", again, seq)
	}
	if waited := again.at.Sub(time.Unix(0, returned.Load())); waited < delay {
		t.Errorf("redelivered %s after the handler asked for a retry, want at least %s", waited, delay)
	}
	if a := recv(t, acks, "the ack"); a.streamSeq != seq || a.delivered != 2 || a.body != "+ACK" {
		t.Fatalf("second settlement = %+v, want +ACK of the second delivery", a)
	}
	info := settledInfo(t, e.js, contracts.StreamRequests, durable, func(i *jetstream.ConsumerInfo) bool {
		return i.NumAckPending == 0 && i.AckFloor.Stream == seq && i.Delivered.Consumer == 2
	})
	if info.NumAckPending != 0 || info.AckFloor.Stream != seq || info.Delivered.Consumer != 2 {
		t.Errorf("consumer after the retry: ack pending %d, ack floor %d, deliveries %d; want 0, %d, 2",
			info.NumAckPending, info.AckFloor.Stream, info.Delivered.Consumer, seq)
	}
}

func nakDelay(t *testing.T, a ackEvent) time.Duration {
	t.Helper()
	_, body, ok := strings.Cut(a.body, " ")
	if !ok {
		return 0
	}
	var v struct {
		Delay int64 `json:"delay"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("nak body %q: %v", a.body, err)
	}
	return time.Duration(v.Delay)
}

type deadLetterCall struct{ stream, reason string }

func TestConsumePoisonDeadLetters(t *testing.T) {
	e := newEnv(t)
	const durable = "test-poison"
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	handled := make(chan delivery, 16)
	dead := make(chan deadLetterCall, 16)
	e.consume(t, e.js, events.ConsumerConfig{
		Stream: contracts.StreamRequests, Durable: durable,
		OnDeadLetter: func(stream, reason string) { dead <- deadLetterCall{stream, reason} },
	}, func(_ context.Context, m jetstream.Msg) error {
		handled <- deliveryOf(t, m)
		if bytes.HasPrefix(m.Data(), []byte("{")) {
			return nil
		}
		return events.Poison(errors.New("cannot decode request"))
	})

	poison := []byte("not json \xff\x00 at all")
	hdr := nats.Header{}
	hdr.Set(events.HeaderTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	seq := e.publish(t, "Billing Bot", poison, hdr)

	if d := recv(t, handled, "the poison message"); d.seq != seq || d.delivered != 1 {
		t.Fatalf("handled %+v, want seq %d", d, seq)
	}
	if a := recv(t, acks, "the term"); a.streamSeq != seq || a.kind() != "+TERM" {
		t.Fatalf("settlement = %+v, want +TERM of seq %d", a, seq)
	}
	if call := recv(t, dead, "OnDeadLetter"); call != (deadLetterCall{contracts.StreamRequests, "poison"}) {
		t.Errorf("OnDeadLetter(%q, %q), want (%q, %q)", call.stream, call.reason, contracts.StreamRequests, "poison")
	}

	dl := e.deadLetter(t, contracts.StreamRequests)
	if !bytes.Equal(dl.Data, poison) {
		t.Errorf("dead letter data = %q, want the original %q", dl.Data, poison)
	}
	wantHeaders := map[string]string{
		events.HeaderDeadLetterSubject:  contracts.ToolRequestedSubject("Billing Bot"),
		events.HeaderDeadLetterStream:   contracts.StreamRequests,
		events.HeaderDeadLetterSeq:      strconv.FormatUint(seq, 10),
		events.HeaderDeadLetterConsumer: durable,
		events.HeaderTraceparent:        hdr.Get(events.HeaderTraceparent),
	}
	for k, want := range wantHeaders {
		if got := dl.Header.Get(k); got != want {
			t.Errorf("dead letter header %s = %q, want %q", k, got, want)
		}
	}
	if reason := dl.Header.Get(events.HeaderDeadLetterReason); !strings.Contains(reason, "cannot decode request") {
		t.Errorf("dead letter reason = %q, want the handler's error", reason)
	}

	// Never redelivered: a later message is the next and last delivery.
	next := e.publish(t, "Billing Bot", []byte(`{}`), nil)
	if d := recv(t, handled, "the next message"); d.seq != next || d.delivered != 1 {
		t.Fatalf("handled %+v after the poison message, want seq %d", d, next)
	}
	if a := recv(t, acks, "the next ack"); a.streamSeq != next || a.body != "+ACK" {
		t.Fatalf("settlement = %+v, want +ACK of seq %d", a, next)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, 2)
	if n := len(dead); n != 0 {
		t.Errorf("OnDeadLetter called %d more times", n)
	}
}

func TestConsumeGivesUpAtMaxDeliver(t *testing.T) {
	e := newEnv(t)
	const (
		durable = "test-maxdeliver"
		backoff = 10 * time.Millisecond
	)
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	handled := make(chan delivery, 16)
	dead := make(chan deadLetterCall, 16)
	e.consume(t, e.js, events.ConsumerConfig{
		Stream: contracts.StreamRequests, Durable: durable, MaxDeliver: 3, Backoff: backoff,
		OnDeadLetter: func(stream, reason string) { dead <- deadLetterCall{stream, reason} },
	}, func(_ context.Context, m jetstream.Msg) error {
		d := deliveryOf(t, m)
		handled <- d
		if string(d.data) == "ok" {
			return nil
		}
		return errors.New("database unavailable")
	})

	data := []byte(`{"spec":"countersign.approval.requested/v1"}`)
	seq := e.publish(t, "billing", data, nil)
	// Plain errors back off exponentially from Backoff, then the last
	// delivery is dead-lettered instead of handed back.
	for i, want := range []struct {
		kind  string
		delay time.Duration
	}{{"-NAK", backoff}, {"-NAK", 2 * backoff}, {"+TERM", 0}} {
		d := recv(t, handled, fmt.Sprintf("delivery %d", i+1))
		if d.seq != seq || d.delivered != uint64(i+1) {
			t.Fatalf("delivery %d = %+v, want seq %d delivered %d times", i+1, d, seq, i+1)
		}
		a := recv(t, acks, fmt.Sprintf("settlement %d", i+1))
		if a.streamSeq != seq || a.kind() != want.kind || (want.delay != 0 && nakDelay(t, a) != want.delay) {
			t.Fatalf("settlement %d = %+v, want %s %s", i+1, a, want.kind, want.delay)
		}
	}
	if call := recv(t, dead, "OnDeadLetter"); call != (deadLetterCall{contracts.StreamRequests, "max_deliver"}) {
		t.Errorf("OnDeadLetter(%q, %q), want (%q, max_deliver)", call.stream, call.reason, contracts.StreamRequests)
	}
	dl := e.deadLetter(t, contracts.StreamRequests)
	if !bytes.Equal(dl.Data, data) {
		t.Errorf("dead letter data = %q, want %q", dl.Data, data)
	}
	if got, want := dl.Header.Get(events.HeaderDeadLetterReason), "gave up after 3 deliveries: database unavailable"; got != want {
		t.Errorf("dead letter reason = %q, want %q", got, want)
	}
	if got := dl.Header.Get(events.HeaderDeadLetterSeq); got != strconv.FormatUint(seq, 10) {
		t.Errorf("dead letter stream seq = %q, want %d", got, seq)
	}

	next := e.publish(t, "billing", []byte("ok"), nil)
	if d := recv(t, handled, "the next message"); d.seq != next {
		t.Fatalf("handled %+v, want seq %d: the dead-lettered message came back", d, next)
	}
	if a := recv(t, acks, "the next ack"); a.streamSeq != next || a.body != "+ACK" {
		t.Fatalf("settlement = %+v, want +ACK of seq %d", a, next)
	}
	info := settledInfo(t, e.js, contracts.StreamRequests, durable, func(i *jetstream.ConsumerInfo) bool {
		return i.NumAckPending == 0 && i.Delivered.Consumer == 4
	})
	if info.NumAckPending != 0 || info.Delivered.Consumer != 4 {
		t.Errorf("consumer: ack pending %d, deliveries %d; want 0 and 4", info.NumAckPending, info.Delivered.Consumer)
	}
}

func TestConsumeSurvivesPanic(t *testing.T) {
	e := newEnv(t)
	const durable = "test-panic"
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	handled := make(chan delivery, 16)
	dead := make(chan deadLetterCall, 16)
	e.consume(t, e.js, events.ConsumerConfig{
		Stream: contracts.StreamRequests, Durable: durable,
		OnDeadLetter: func(stream, reason string) { dead <- deadLetterCall{stream, reason} },
	}, func(_ context.Context, m jetstream.Msg) error {
		handled <- deliveryOf(t, m)
		if string(m.Data()) == "boom" {
			var rec *contracts.Record
			_ = rec.Status // nil pointer dereference
		}
		return nil
	})

	seq := e.publish(t, "billing", []byte("boom"), nil)
	recv(t, handled, "the panicking delivery")
	if a := recv(t, acks, "the term"); a.streamSeq != seq || a.kind() != "+TERM" {
		t.Fatalf("settlement = %+v, want +TERM of seq %d", a, seq)
	}
	if call := recv(t, dead, "OnDeadLetter"); call.reason != "poison" {
		t.Errorf("OnDeadLetter reason = %q, want poison", call.reason)
	}
	dl := e.deadLetter(t, contracts.StreamRequests)
	if reason := dl.Header.Get(events.HeaderDeadLetterReason); !strings.Contains(reason, "handler panic") {
		t.Errorf("dead letter reason = %q, want it to name the panic", reason)
	}
	if string(dl.Data) != "boom" {
		t.Errorf("dead letter data = %q, want boom", dl.Data)
	}

	// The same loop keeps working.
	next := e.publish(t, "billing", []byte(`{}`), nil)
	if d := recv(t, handled, "the next message"); d.seq != next || d.delivered != 1 {
		t.Fatalf("handled %+v, want seq %d", d, next)
	}
	if a := recv(t, acks, "the next ack"); a.streamSeq != next || a.body != "+ACK" {
		t.Fatalf("settlement = %+v, want +ACK of seq %d", a, next)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, 2)
}

// barrier releases its waiters in groups of n.
type barrier struct {
	mu    sync.Mutex
	n     int
	count int
	ch    chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, ch: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	ch := b.ch
	b.count++
	if b.count == b.n {
		close(ch)
		b.ch, b.count = make(chan struct{}), 0
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestConsumeConcurrency(t *testing.T) {
	e := newEnv(t)
	const (
		durable     = "test-concurrency"
		concurrency = 4
		messages    = 3 * concurrency
	)
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	ctx := testContext(t)
	b := newBarrier(concurrency)
	var inFlight, peak atomic.Int32
	passed := make(chan uint64, messages)
	e.consume(t, e.js, events.ConsumerConfig{
		Stream: contracts.StreamRequests, Durable: durable, Concurrency: concurrency,
	}, func(_ context.Context, m jetstream.Msg) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		// Returns only once four handlers are running at the same time.
		if err := b.wait(ctx); err != nil {
			return err
		}
		passed <- deliveryOf(t, m).seq
		return nil
	})

	for i := range messages {
		e.publish(t, "billing", fmt.Appendf(nil, `{"n":%d}`, i), nil)
	}
	seen := map[uint64]bool{}
	for range messages {
		seen[recv(t, passed, "handlers to meet at the barrier")] = true
	}
	for range messages {
		if a := recv(t, acks, "acks"); a.body != "+ACK" || a.delivered != 1 {
			t.Fatalf("settlement %+v, want +ACK of a first delivery", a)
		}
	}
	if len(seen) != messages {
		t.Errorf("%d distinct messages passed the barrier, want %d", len(seen), messages)
	}
	if p := peak.Load(); p != concurrency {
		t.Errorf("at most %d handlers ran at once, want exactly %d", p, concurrency)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, messages)
}

func TestConsumeSharedDurable(t *testing.T) {
	e := newEnv(t)
	const (
		durable  = "test-shared"
		messages = 60
	)
	acks := e.watchAcks(t, contracts.StreamRequests, durable)
	type handling struct {
		loop int
		seq  uint64
	}
	handled := make(chan handling, 2*messages)
	cfg := events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: durable, Concurrency: 2}
	for loop := range 2 {
		// Each loop has its own connection, as two processes would.
		js := e.srv.JetStream()
		e.consume(t, js, cfg, func(_ context.Context, m jetstream.Msg) error {
			handled <- handling{loop, deliveryOf(t, m).seq}
			return nil
		})
	}

	for i := range messages {
		e.publish(t, fmt.Sprintf("agent-%d", i%3), fmt.Appendf(nil, `{"n":%d}`, i), nil)
	}
	count := map[uint64]int{}
	perLoop := [2]int{}
	for range messages {
		h := recv(t, handled, "messages")
		count[h.seq]++
		perLoop[h.loop]++
	}
	for range messages {
		if a := recv(t, acks, "acks"); a.body != "+ACK" || a.delivered != 1 {
			t.Fatalf("settlement %+v, want +ACK of a first delivery", a)
		}
	}
	for seq, n := range count {
		if n != 1 {
			t.Errorf("message %d handled %d times", seq, n)
		}
	}
	if len(count) != messages {
		t.Errorf("%d distinct messages handled, want %d", len(count), messages)
	}
	assertSettled(t, e.js, contracts.StreamRequests, durable, messages)
	t.Logf("messages per loop: %v", perLoop)
}

func TestConsumeConfigValidation(t *testing.T) {
	e := newEnv(t)
	noop := func(context.Context, jetstream.Msg) error { return nil }
	cases := []struct {
		name  string
		cfg   events.ConsumerConfig
		wants []string
	}{
		{"no stream", events.ConsumerConfig{Durable: "d"}, []string{"ConsumerConfig.Stream"}},
		{"no durable", events.ConsumerConfig{Stream: contracts.StreamRequests}, []string{"ConsumerConfig.Durable"}},
		{"one delivery", events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: "d", MaxDeliver: 1},
			[]string{"ConsumerConfig.MaxDeliver"}},
		{"negative deliveries", events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: "d", MaxDeliver: -1},
			[]string{"ConsumerConfig.MaxDeliver"}},
		{"negative concurrency", events.ConsumerConfig{Stream: contracts.StreamRequests, Durable: "d", Concurrency: -2},
			[]string{"ConsumerConfig.Concurrency"}},
		{"everything wrong", events.ConsumerConfig{MaxDeliver: 1, Concurrency: -1},
			[]string{"ConsumerConfig.Stream", "ConsumerConfig.Durable", "ConsumerConfig.MaxDeliver", "ConsumerConfig.Concurrency"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := events.Consume(testContext(t), e.js, tc.cfg, noop)
			if err == nil {
				t.Fatal("Consume accepted an invalid config")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
	stream, err := e.js.Stream(testContext(t), contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(testContext(t))
	for name := range names.Name() {
		t.Errorf("an invalid config created consumer %q", name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	ctx := testContext(t)

	for i := range 2 {
		if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
			t.Fatalf("Provision #%d: %v", i+1, err)
		}
	}
	assertProvisioned(t, js, events.DefaultRetention)

	// Messages survive a re-provision with another retention: the streams
	// are updated, not recreated.
	ack, err := events.PublishRaw(ctx, js, contracts.ToolRequestedSubject("billing"), []byte(`{}`), "kept", nil)
	if err != nil {
		t.Fatal(err)
	}
	const retention = 48 * time.Hour
	for i := range 2 {
		if err := events.Provision(ctx, js, events.ProvisionConfig{Retention: retention}); err != nil {
			t.Fatalf("Provision with retention %s #%d: %v", retention, i+1, err)
		}
	}
	assertProvisioned(t, js, retention)
	requests, err := js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := requests.GetLastMsgForSubject(ctx, contracts.ToolRequestedSubject("billing")); err != nil || msg.Sequence != ack.Sequence {
		t.Errorf("message published before the update: %v, %v; want seq %d", msg, err, ack.Sequence)
	}

	err = events.Provision(ctx, js, events.ProvisionConfig{Replicas: 7})
	if err == nil || !strings.Contains(err.Error(), "ProvisionConfig.Replicas") {
		t.Errorf("Provision with 7 replicas: %v, want an error naming ProvisionConfig.Replicas", err)
	}
	err = events.Provision(ctx, js, events.ProvisionConfig{Retention: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "ProvisionConfig.DuplicateWindow") {
		t.Errorf("Provision with a retention shorter than the duplicate window: %v, want an error naming ProvisionConfig.DuplicateWindow", err)
	}
}

func assertProvisioned(t *testing.T, js jetstream.JetStream, retention time.Duration) {
	t.Helper()
	ctx := testContext(t)
	for _, want := range events.StreamConfigs(events.ProvisionConfig{Retention: retention}) {
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Errorf("stream %s: %v", want.Name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := info.Config
		if got.MaxAge != retention {
			t.Errorf("stream %s MaxAge = %s, want %s", want.Name, got.MaxAge, retention)
		}
		if !slices.Equal(got.Subjects, want.Subjects) || got.Storage != want.Storage ||
			got.Duplicates != want.Duplicates || got.Replicas != want.Replicas {
			t.Errorf("stream %s config = subjects %v storage %v duplicates %s replicas %d; want %v %v %s %d",
				want.Name, got.Subjects, got.Storage, got.Duplicates, got.Replicas,
				want.Subjects, want.Storage, want.Duplicates, want.Replicas)
		}
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatalf("bucket %s: %v", contracts.BucketApprovals, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != retention || st.History() != 1 {
		t.Errorf("bucket %s TTL %s history %d, want %s and 1", contracts.BucketApprovals, st.TTL(), st.History(), retention)
	}
	// No bucket answers direct gets, whose answer is the stored message
	// itself on any subject the requester names (tuneBucket).
	for _, b := range []string{contracts.BucketApprovals, contracts.BucketPolicy, contracts.BucketGrants, contracts.BucketSessions,
		contracts.BucketReceipts, contracts.BucketReceiptUses, contracts.BucketPasskeys, contracts.BucketPush} {
		rs, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if rs.CachedInfo().Config.AllowDirect {
			t.Errorf("bucket %s answers direct gets", b)
		}
	}
	// A key takes its first value as a plain write.
	probe := "probe-" + strconv.FormatInt(int64(retention), 10)
	if _, err := kv.Put(ctx, probe, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, probe); err != nil || string(e.Value()) != "{}" {
		t.Fatalf("read back: %v", err)
	}
}

func TestPublishDeduplicatesByMsgID(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	eventID := "312783e4-11a0-5e21-b755-806afd756c7e"
	subject := contracts.DecidedSubject(eventID)
	msg := contracts.Decided{
		Spec: contracts.SpecDecided, EventID: eventID, Status: contracts.StatusApproved, Agent: "billing",
		Revision: 3, DecidedAt: time.Date(2026, 3, 4, 9, 31, 40, 0, time.UTC),
	}
	first, err := events.Publish(ctx, e.js, subject, msg, "decided:"+eventID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate {
		t.Error("first publish acknowledged as a duplicate")
	}
	msg.Revision = 4 // a retry may carry other bytes; the id decides
	second, err := events.Publish(ctx, e.js, subject, msg, "decided:"+eventID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate || second.Sequence != first.Sequence || second.Stream != contracts.StreamEvents {
		t.Errorf("second publish ack = %+v, want a duplicate of seq %d on %s", second, first.Sequence, contracts.StreamEvents)
	}

	s, err := e.js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 1 {
		t.Errorf("%d messages stored on %s, want 1", n, subject)
	}
	stored, err := s.GetMsg(ctx, first.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	var got contracts.Decided
	if err := json.Unmarshal(stored.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 3 || stored.Header.Get(jetstream.MsgIDHeader) != "decided:"+eventID {
		t.Errorf("stored revision %d, msg id %q; want the first publish", got.Revision, stored.Header.Get(jetstream.MsgIDHeader))
	}

	other, err := events.Publish(ctx, e.js, subject, msg, "decided:other", nil)
	if err != nil || other.Duplicate || other.Sequence == first.Sequence {
		t.Errorf("publish with another id = %+v, %v; want a new message", other, err)
	}
}

package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
)

// busWait bounds every wait on the bus; a healthy run needs milliseconds.
const busWait = 15 * time.Second

// busNow is the arbiters' clock in these tests: an hour after the request
// was created, well before it expires.
func busNow() time.Time { return t0.Add(time.Hour) }

// bus is one embedded NATS server with the contract's streams and bucket,
// and a log of every acknowledgement the arbiters send for votes and commands.
type bus struct {
	t    *testing.T
	srv  *eventstest.Server
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	acks *ackLog
}

func newBus(t *testing.T, pc events.ProvisionConfig) *bus {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	if err := events.Provision(ctx, js, pc); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	return &bus{t: t, srv: srv, js: js, kv: kv, acks: sniffAcks(t, srv.Connect())}
}

// busPolicy is the policy the bus tests' requests were decided by: version
// v1 of request(), whose rule refunds allows the loosest snapshot those
// tests use (any approver, no veto, self-approval, every decision).
const busPolicy = `
version: v1
rules:
  - name: refunds
    tools: ["*"]
    action: require_approval
    veto: false
    allow_self_approval: true
    allowed_decisions: [approve, reject, edit, respond]
`

// approveOnTimeoutHourPolicy is busPolicy's rule with time approving after
// an hour (the timer tests and the size budget's expire path).
const approveOnTimeoutHourPolicy = `
version: v1-approve-on-timeout-1h
rules:
  - name: refunds
    tools: ["*"]
    action: require_approval
    veto: false
    allow_self_approval: true
    allowed_decisions: [approve, reject, edit, respond]
    timeout: 1h
    on_timeout: approve
`

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startArbiter runs an arbiter replica on its own connection until the
// test ends or stop is called. Unless cfg says otherwise it trusts the bus
// tests' policies.
func (b *bus) startArbiter(cfg arbiter.Config) (stop func()) {
	b.t.Helper()
	cfg.JS = b.srv.JetStreamAs(embedded.RoleArbiter) // each replica on its own connection
	if cfg.Now == nil {
		cfg.Now = busNow
	}
	if cfg.Policies == nil {
		cfg.Policies = arbiter.Policies{mustPolicy(b.t, busPolicy), mustPolicy(b.t, approveOnTimeoutHourPolicy)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	arb, err := arbiter.New(ctx, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- arb.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.t.Errorf("arbiter.Run: %v", err)
			}
		})
	}
	b.t.Cleanup(stop)
	return stop
}

// publish publishes v on subject with a fresh Nats-Msg-Id and returns its
// stream sequence.
func (b *bus) publish(subject string, v any) uint64 {
	b.t.Helper()
	data, ok := v.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			b.t.Fatal(err)
		}
	}
	ack, err := events.PublishRaw(context.Background(), b.js, subject, data, uuid.NewString(), nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

func (b *bus) vote(v contracts.Vote) uint64 {
	return b.publish(contracts.ResolvedSubject(v.EventID), v)
}

func (b *bus) command(c contracts.Command) uint64 {
	return b.publish(contracts.CommandSubject(c.EventID), c)
}

// create publishes req as the orchestrator does and waits for its record.
func (b *bus) create(req contracts.ApprovalRequested) {
	b.t.Helper()
	if _, err := events.Publish(context.Background(), b.js, contracts.ToolRequestedSubject(req.Run.Agent), req, req.EventID, nil); err != nil {
		b.t.Fatal(err)
	}
	b.waitRecord(req.EventID, func(*contracts.Record) bool { return true })
}

// waitRecord blocks until the record satisfies cond, using a KV watch.
func (b *bus) waitRecord(id string, cond func(*contracts.Record) bool) contracts.Record {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	w, err := b.kv.Watch(ctx, id)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last contracts.Record
	for {
		select {
		case entry := <-w.Updates():
			if entry == nil {
				continue
			}
			if err := json.Unmarshal(entry.Value(), &last); err != nil {
				b.t.Fatal(err)
			}
			if cond(&last) {
				return last
			}
		case <-ctx.Done():
			b.t.Fatalf("record %s never reached the expected state; last seen: %+v", id, last)
		}
	}
}

// record reads the record and its revision.
func (b *bus) record(id string) (contracts.Record, uint64) {
	b.t.Helper()
	entry, err := b.kv.Get(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	var rec contracts.Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		b.t.Fatal(err)
	}
	return rec, entry.Revision()
}

// messages reads every message stored on subject in stream, in order.
func (b *bus) messages(stream, subject string) []jetstream.Msg {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []jetstream.Msg
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			b.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			out = append(out, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			b.t.Fatal(err)
		}
		if n == 0 {
			return out
		}
	}
}

// waitMessage blocks until subject of stream holds a message and returns
// the first one: the server answers the pull as soon as one is stored.
func (b *bus) waitMessage(stream, subject string) jetstream.Msg {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		b.t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(busWait))
	if err != nil {
		b.t.Fatalf("no message on %s: %v", subject, err)
	}
	return m
}

func (b *bus) decidedEvents(id string) []contracts.Decided {
	b.t.Helper()
	var out []contracts.Decided
	for _, m := range b.messages(contracts.StreamEvents, contracts.DecidedSubject(id)) {
		var d contracts.Decided
		if err := json.Unmarshal(m.Data(), &d); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func (b *bus) changedEvents(id string) []contracts.Changed {
	b.t.Helper()
	var out []contracts.Changed
	for _, m := range b.messages(contracts.StreamEvents, contracts.ChangedSubject(id)) {
		var c contracts.Changed
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// waitDuplicateWindow returns once the HITL_EVENTS duplicate window has
// passed for everything published on it so far: a probe published now is
// re-published under the same Nats-Msg-Id until the stream stops calling it
// a duplicate. Every earlier message id is forgotten by then.
func (b *bus) waitDuplicateWindow() {
	b.t.Helper()
	id := "probe:" + uuid.NewString()
	subject := contracts.SubjectNotifyPrefix + "probe.x"
	deadline := time.Now().Add(busWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	first := true
	for {
		ack, err := events.PublishRaw(context.Background(), b.js, subject, []byte(`{}`), id, nil)
		if err != nil {
			b.t.Fatal(err)
		}
		if !first && !ack.Duplicate {
			return
		}
		first = false
		if time.Now().After(deadline) {
			b.t.Fatal("the duplicate window never passed")
		}
		<-tick.C
	}
}

// ackEvent is one acknowledgement an arbiter sent for a message of HITL_RESOLUTIONS.
type ackEvent struct {
	seq       uint64 // stream sequence of the message
	delivered uint64 // its delivery count
	kind      string // +ACK, -NAK, +TERM, +WPI
}

// ackLog records the acknowledgements of the arbiter's resolutions consumer
// by listening on its ack subjects: a test can wait for "the arbiter is done
// with message n" without sleeping.
type ackLog struct {
	mu      sync.Mutex
	events  []ackEvent
	changed chan struct{}
}

func sniffAcks(t *testing.T, nc *nats.Conn) *ackLog {
	t.Helper()
	return sniffAcksOf(t, nc, contracts.StreamResolutions, arbiter.DurableResolutions)
}

// sniffAcksOf records the acknowledgements of any durable consumer.
func sniffAcksOf(t *testing.T, nc *nats.Conn, stream, durable string) *ackLog {
	t.Helper()
	l := &ackLog{changed: make(chan struct{})}
	_, err := nc.Subscribe("$JS.ACK."+stream+"."+durable+".>", func(m *nats.Msg) {
		ev, ok := parseAck(m)
		if !ok {
			t.Errorf("unexpected ack subject %q", m.Subject)
			return
		}
		l.mu.Lock()
		l.events = append(l.events, ev)
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// parseAck reads $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>.
func parseAck(m *nats.Msg) (ackEvent, bool) {
	tok := strings.Split(m.Subject, ".")
	if len(tok) != 9 {
		return ackEvent{}, false
	}
	delivered, err1 := strconv.ParseUint(tok[4], 10, 64)
	seq, err2 := strconv.ParseUint(tok[5], 10, 64)
	if err1 != nil || err2 != nil {
		return ackEvent{}, false
	}
	kind, _, _ := strings.Cut(string(m.Data), " ")
	return ackEvent{seq: seq, delivered: delivered, kind: kind}, true
}

// of returns the acknowledgements of the message with stream sequence seq.
func (l *ackLog) of(seq uint64) []ackEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ackEvent
	for _, ev := range l.events {
		if ev.seq == seq {
			out = append(out, ev)
		}
	}
	return out
}

// wait blocks until the message with stream sequence seq got an
// acknowledgement of kind, and returns the acknowledgements it got so far.
func (l *ackLog) wait(t *testing.T, seq uint64, kind string) []ackEvent {
	t.Helper()
	timeout := time.After(busWait)
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		evs := l.of(seq)
		if slices.ContainsFunc(evs, func(ev ackEvent) bool { return ev.kind == kind }) {
			return evs
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("message %d never got %s; got %+v", seq, kind, evs)
		}
	}
}

// refusedCount reads countersign_refused_votes_total{reason} from reg.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return counterValue(t, reg, "countersign_refused_votes_total", "reason", reason)
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestArbiterDeadLettersGarbageAndKeepsWorking(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	var mu sync.Mutex
	var deadLettered []string
	b.startArbiter(arbiter.Config{
		UnknownEventDelay: 10 * time.Millisecond, UnknownEventAttempts: 3,
		OnDeadLetter: func(stream, reason string) {
			mu.Lock()
			defer mu.Unlock()
			deadLettered = append(deadLettered, stream+"/"+reason)
		},
	})
	req := request(t)
	b.create(req)

	const garbageSubject = contracts.SubjectResolvedPrefix + "x"
	wrongSpec := vote("v-spec", "alice", contracts.DecisionApprove)
	wrongSpec.EventID, wrongSpec.Spec = "x", "countersign.approval.resolved/v9"
	unknown := vote("v-unknown", "alice", contracts.DecisionApprove)
	unknown.EventID = "x"
	otherEvent := vote("v-other", "alice", contracts.DecisionApprove) // names eventID, sent to x
	cases := []struct {
		name   string
		data   any
		reason string // a part of the dead letter reason
	}{
		{"not JSON", []byte("approve it!"), "decode vote: invalid character"},
		{"JSON of the wrong shape", []byte(`{"vote_id":7,"approver":"alice"}`), "decode vote: json: cannot unmarshal"},
		{"wrong spec", wrongSpec, `unknown spec "countersign.approval.resolved/v9"`},
		{"event id not the subject's", otherEvent, "event_id does not match the subject"},
		{"unknown event", unknown, contracts.ReasonUnknownEvent},
	}
	seqs := map[uint64]int{}
	for i, tc := range cases {
		seqs[b.publish(garbageSubject, tc.data)] = i
	}

	dl, err := b.js.OrderedConsumer(context.Background(), contracts.StreamDeadLetter, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.DeadLetterSubject(contracts.StreamResolutions)},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for len(seen) < len(cases) {
		m, err := dl.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			t.Fatalf("waiting for dead letters (got %d of %d): %v", len(seen), len(cases), err)
		}
		h := m.Headers()
		seq, err := strconv.ParseUint(h.Get(events.HeaderDeadLetterSeq), 10, 64)
		if err != nil {
			t.Fatalf("dead letter without a stream sequence: %v", h)
		}
		i, ok := seqs[seq]
		if !ok {
			t.Fatalf("unexpected dead letter of message %d: %v", seq, h)
		}
		tc := cases[i]
		seen[i] = true
		t.Run(tc.name, func(t *testing.T) {
			if got := h.Get(events.HeaderDeadLetterReason); !strings.Contains(got, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", got, tc.reason)
			}
			if got := h.Get(events.HeaderDeadLetterSubject); got != garbageSubject {
				t.Errorf("subject header %q, want %q", got, garbageSubject)
			}
			if got := h.Get(events.HeaderDeadLetterStream); got != contracts.StreamResolutions {
				t.Errorf("stream header %q", got)
			}
			if got := h.Get(events.HeaderDeadLetterConsumer); got != arbiter.DurableResolutions {
				t.Errorf("consumer header %q", got)
			}
			want, _ := tc.data.([]byte)
			if want == nil {
				want, _ = json.Marshal(tc.data)
			}
			if string(m.Data()) != string(want) {
				t.Errorf("dead letter data %s, want the original %s", m.Data(), want)
			}
			// Undecodable messages are terminated on their first delivery; a
			// vote for an unknown event only after its retry attempts.
			acks := b.acks.wait(t, seq, "+TERM")
			wantNaks := 0
			if tc.reason == contracts.ReasonUnknownEvent {
				wantNaks = 2
			}
			naks := 0
			for _, a := range acks {
				if a.kind == "-NAK" {
					naks++
				}
				if a.kind == "+TERM" && a.delivered != uint64(wantNaks+1) {
					t.Errorf("terminated on delivery %d, want %d", a.delivered, wantNaks+1)
				}
			}
			if naks != wantNaks {
				t.Errorf("%d retries before the dead letter, want %d: %+v", naks, wantNaks, acks)
			}
		})
	}
	mu.Lock()
	if len(deadLettered) != len(cases) || slices.ContainsFunc(deadLettered, func(s string) bool {
		return s != contracts.StreamResolutions+"/poison"
	}) {
		t.Errorf("OnDeadLetter calls: %v", deadLettered)
	}
	mu.Unlock()

	// The arbiter keeps working, and the garbage left no trace in the record.
	good := vote("v-good", "alice", contracts.DecisionApprove)
	b.vote(good)
	rec := b.waitRecord(eventID, func(r *contracts.Record) bool { return r.Terminal() })
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].VoteID != good.VoteID ||
		len(rec.RefusedVotes) != 0 {
		t.Fatalf("record after the valid vote: status %s, votes %+v, refused %+v", rec.Status, rec.Votes, rec.RefusedVotes)
	}
}

func TestArbiterReplicasDecideOnce(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		b.startArbiter(arbiter.Config{Registerer: reg})
	}
	b.create(request(t, anyApprover))

	const n = 50
	votes := make([]contracts.Vote, n)
	for i := range votes {
		decision := contracts.DecisionApprove
		if i%2 == 1 {
			decision = contracts.DecisionReject
		}
		votes[i] = vote(fmt.Sprintf("vote-%02d", i), fmt.Sprintf("approver-%02d", i), decision)
	}
	seqs := make([]uint64, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range votes {
		wg.Go(func() {
			<-start
			seqs[i] = b.vote(votes[i])
		})
	}
	close(start)
	wg.Wait()
	for _, seq := range seqs {
		b.acks.wait(t, seq, "+ACK")
	}

	rec, _ := b.record(eventID)
	if !rec.Terminal() || len(rec.Votes) != 1 {
		t.Fatalf("want one counted vote on a terminal record; status %s, votes %+v", rec.Status, rec.Votes)
	}
	winner := rec.Votes[0]
	wantStatus := map[string]string{
		contracts.DecisionApprove: contracts.StatusApproved, contracts.DecisionReject: contracts.StatusRejected,
	}[winner.Decision]
	if rec.Status != wantStatus || rec.Outcome == nil || !slices.Equal(rec.Outcome.DecidedBy, []string{winner.Approver.ID}) {
		t.Fatalf("outcome %+v with status %s does not follow the winning vote %+v", rec.Outcome, rec.Status, winner)
	}
	if len(rec.RefusedVotes) != n-1 {
		t.Fatalf("%d refused votes, want %d", len(rec.RefusedVotes), n-1)
	}
	refusedIDs := map[string]bool{}
	for _, r := range rec.RefusedVotes {
		if r.Reason != contracts.ReasonClosed {
			t.Errorf("vote %s refused as %s, want %s", r.VoteID, r.Reason, contracts.ReasonClosed)
		}
		refusedIDs[r.VoteID] = true
	}
	for _, v := range votes {
		if v.VoteID != winner.VoteID && !refusedIDs[v.VoteID] {
			t.Errorf("vote %s is neither counted nor refused", v.VoteID)
		}
	}

	decided := b.decidedEvents(eventID)
	if len(decided) != 1 {
		t.Fatalf("%d decided events, want exactly 1: %+v", len(decided), decided)
	}
	if d := decided[0]; d.Status != rec.Status || d.Outcome == nil || !slices.Equal(d.Outcome.DecidedBy, rec.Outcome.DecidedBy) {
		t.Fatalf("decided event %+v does not match the record", d)
	}
	changed := b.changedEvents(eventID)
	if len(changed) != n-1 {
		t.Fatalf("%d changed events, want %d refusals", len(changed), n-1)
	}
	for _, c := range changed {
		if c.Change != contracts.ChangeVoteRefused || c.Reason != contracts.ReasonClosed || c.Status != rec.Status ||
			!refusedIDs[c.VoteID] || c.Approver == nil {
			t.Errorf("changed event %+v, want vote_refused/closed for a refused vote", c)
		}
	}
	var decidedTotal, refusedTotal float64
	for _, reg := range regs {
		decidedTotal += counterValue(t, reg, "countersign_decisions_total", "status", rec.Status)
		refusedTotal += refusedCount(t, reg, contracts.ReasonClosed)
	}
	if decidedTotal != 1 || refusedTotal != n-1 {
		t.Errorf("metrics across replicas: %v decisions, %v closed refusals; want 1 and %d", decidedTotal, refusedTotal, n-1)
	}
}

func TestArbiterVotesOnDecidedRecords(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	b.startArbiter(arbiter.Config{})
	b.create(request(t))

	first := vote("v-alice", "alice", contracts.DecisionApprove)
	b.acks.wait(t, b.vote(first), "+ACK")
	approved, _ := b.record(eventID)
	if approved.Status != contracts.StatusApproved {
		t.Fatalf("status %s after alice approved", approved.Status)
	}

	late := vote("v-bob", "bob", contracts.DecisionReject, comment("too late"))
	b.acks.wait(t, b.vote(late), "+ACK")
	rec, rev := b.record(eventID)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 {
		t.Fatalf("a vote on a decided record changed its outcome: %s, votes %+v", rec.Status, rec.Votes)
	}
	if len(rec.RefusedVotes) != 1 {
		t.Fatalf("refused votes %+v, want bob's", rec.RefusedVotes)
	}
	if r := rec.RefusedVotes[0]; r.VoteID != late.VoteID || r.Approver.ID != "bob" || r.Reason != contracts.ReasonClosed ||
		r.Decision != contracts.DecisionReject {
		t.Fatalf("refused vote %+v, want bob's reject refused as closed", r)
	}
	changed := b.changedEvents(eventID)
	if len(changed) != 1 {
		t.Fatalf("changed events %+v, want bob's refusal", changed)
	}
	if c := changed[0]; c.Change != contracts.ChangeVoteRefused || c.VoteID != late.VoteID || c.Reason != contracts.ReasonClosed ||
		c.Status != contracts.StatusApproved || c.Revision != rev {
		t.Fatalf("changed event %+v", c)
	}

	// Sent again under new message ids, so the stream does not drop them and
	// the arbiter sees them: a counted and a refused vote change nothing.
	for _, v := range []contracts.Vote{first, late} {
		b.acks.wait(t, b.vote(v), "+ACK")
		again, againRev := b.record(eventID)
		if againRev != rev {
			t.Fatalf("duplicate vote %s wrote the record (revision %d → %d): %+v", v.VoteID, rev, againRev, again)
		}
	}
	if got := b.changedEvents(eventID); len(got) != 1 {
		t.Fatalf("duplicate votes announced changes: %+v", got)
	}
	if got := b.decidedEvents(eventID); len(got) != 1 {
		t.Fatalf("%d decided events, want 1", len(got))
	}
}

func TestArbiterRefusedCommandsNameTheirKind(t *testing.T) {
	b := newBus(t, events.ProvisionConfig{})
	reg := prometheus.NewRegistry()
	b.startArbiter(arbiter.Config{Registerer: reg})
	b.create(request(t))

	// send sends c, waits until the arbiter is done with it and returns the
	// change it announced.
	announced := 0
	send := func(t *testing.T, c contracts.Command) contracts.Changed {
		t.Helper()
		b.acks.wait(t, b.command(c), "+ACK")
		changed := b.changedEvents(eventID)
		if len(changed) != announced+1 {
			t.Fatalf("command %s announced %d changes, want 1: %+v", c.CommandID, len(changed)-announced, changed[announced:])
		}
		announced++
		return changed[len(changed)-1]
	}
	until := func(u time.Time) func(*contracts.Command) { return func(c *contracts.Command) { c.Until = u } }
	claimID := func(id string) func(*contracts.Command) { return func(c *contracts.Command) { c.ClaimID = id } }

	steps := []struct {
		name    string
		before  func(t *testing.T)
		cmd     contracts.Command
		change  string
		reason  string
		refused bool
	}{
		{
			name: "claim before approval", cmd: command("c1", contracts.CommandClaim, "billing", claimID("claim-1")),
			change: contracts.ChangeClaimRefused, reason: contracts.ReasonNotApproved, refused: true,
		},
		{
			name: "extend into the past", cmd: command("c2", contracts.CommandExtend, "alice", until(busNow().Add(-time.Minute))),
			change: contracts.ChangeExtendRefused, reason: contracts.ReasonMalformed, refused: true,
		},
		{
			// Attack: the deadline brought forward, so that on_timeout
			// decides sooner than the rule says.
			name: "extend to an earlier deadline", cmd: command("c2b", contracts.CommandExtend, "alice", until(busNow().Add(time.Minute))),
			change: contracts.ChangeExtendRefused, reason: contracts.ReasonDeadlineNotLater, refused: true,
		},
		{
			// Attack: a command published with a role's credential naming
			// someone who is no approver or admin of the request.
			name: "extend by nobody", cmd: command("c2c", contracts.CommandExtend, "nobody", until(busNow().Add(48*time.Hour))),
			change: contracts.ChangeExtendRefused, reason: contracts.ReasonNotPermitted, refused: true,
		},
		{
			name: "extend", cmd: command("c3", contracts.CommandExtend, "alice", until(busNow().Add(48*time.Hour))),
			change: contracts.ChangeExtended,
		},
		{
			// Attack: another principal claims the approved call first.
			name: "claim by another agent", cmd: command("c4a", contracts.CommandClaim, "other-agent", claimID("claim-x")),
			before: func(t *testing.T) {
				b.acks.wait(t, b.vote(vote("v-alice", "alice", contracts.DecisionApprove)), "+ACK")
			},
			change: contracts.ChangeClaimRefused, reason: contracts.ReasonNotPermitted, refused: true,
		},
		{
			name:   "claim after approval",
			cmd:    command("c4", contracts.CommandClaim, "billing", claimID("claim-1")),
			change: contracts.ChangeClaimed,
		},
		{
			name: "second claim", cmd: command("c5", contracts.CommandClaim, "runner-2", claimID("claim-2")),
			change: contracts.ChangeClaimRefused, reason: contracts.ReasonAlreadyClaimed, refused: true,
		},
		{
			name: "cancel a decided approval", cmd: command("c6", contracts.CommandCancel, "ops-3"),
			change: contracts.ChangeCancelRefused, reason: contracts.ReasonClosed, refused: true,
		},
		{
			name: "extend a decided approval", cmd: command("c7", contracts.CommandExtend, "alice", until(busNow().Add(72*time.Hour))),
			change: contracts.ChangeExtendRefused, reason: contracts.ReasonClosed, refused: true,
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before(t)
			}
			metricBefore := refusedCount(t, reg, st.reason)
			_, revBefore := b.record(eventID)
			got := send(t, st.cmd)
			rec, rev := b.record(eventID)
			if got.Change != st.change || got.By != st.cmd.By || got.Reason != st.reason || got.Status != rec.Status ||
				got.Revision != rev || got.EventID != eventID || got.Spec != contracts.SpecChanged {
				t.Errorf("announced %+v; want change %s by %s, reason %q, status %s, revision %d",
					got, st.change, st.cmd.By, st.reason, rec.Status, rev)
			}
			if !st.refused {
				return
			}
			if rev != revBefore {
				t.Errorf("a refused command wrote the record (revision %d → %d)", revBefore, rev)
			}
			if d := refusedCount(t, reg, st.reason) - metricBefore; d != 1 {
				t.Errorf("refusal counted %v times under %s", d, st.reason)
			}
		})
	}
	rec, _ := b.record(eventID)
	if rec.Status != contracts.StatusApproved || rec.Claim == nil || rec.Claim.ClaimID != "claim-1" ||
		!rec.ExpiresAt.Equal(busNow().Add(48*time.Hour)) {
		t.Fatalf("final record: status %s, claim %+v, expires %s", rec.Status, rec.Claim, rec.ExpiresAt)
	}
}

// The decided event is published at least once: a vote or command that was
// already applied to a terminal record announces the outcome if, and only
// if, no decided event exists for the approval, even after the duplicate
// window of HITL_EVENTS has passed.
func TestArbiterReannouncesOnlyMissingDecisions(t *testing.T) {
	const window = 100 * time.Millisecond // the smallest the server accepts

	// terminal is the record a replica writes when alice's vote decides.
	terminal := func(t *testing.T, v contracts.Vote) contracts.Record {
		res := approval.ApplyVote(approval.NewRecord(request(t), busNow()), v, busNow())
		if !res.Decided {
			t.Fatalf("setting up: %+v", res)
		}
		return res.Record
	}
	// redelivered publishes v before its record exists, so the arbiter has
	// to retry it; setUp then builds the state a crashed replica left
	// behind, and the vote's redelivery meets it.
	redelivered := func(t *testing.T, b *bus, v contracts.Vote, setUp func()) []ackEvent {
		seq := b.vote(v)
		b.acks.wait(t, seq, "-NAK")
		setUp()
		acks := b.acks.wait(t, seq, "+ACK")
		if last := acks[len(acks)-1]; last.kind != "+ACK" || last.delivered < 2 {
			t.Fatalf("want the vote acknowledged on a redelivery; acks %+v", acks)
		}
		return acks
	}
	arbiterCfg := arbiter.Config{UnknownEventDelay: 20 * time.Millisecond, UnknownEventAttempts: 1000}

	t.Run("crash between write and announce", func(t *testing.T) {
		b := newBus(t, events.ProvisionConfig{DuplicateWindow: window})
		b.startArbiter(arbiterCfg)
		v := vote("v-alice", "alice", contracts.DecisionApprove)
		rec := terminal(t, v)
		redelivered(t, b, v, func() {
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.kv.Create(context.Background(), eventID, data); err != nil {
				t.Fatal(err)
			}
		})
		decided := b.decidedEvents(eventID)
		if len(decided) != 1 {
			t.Fatalf("%d decided events, want the missing one announced once", len(decided))
		}
		if d := decided[0]; d.Status != contracts.StatusApproved || d.Outcome == nil ||
			!slices.Equal(d.Outcome.DecidedBy, []string{"alice"}) || d.Agent != rec.Request.Run.Agent {
			t.Fatalf("decided event %+v", d)
		}
	})

	t.Run("crash between announce and ack, redelivered after the duplicate window", func(t *testing.T) {
		b := newBus(t, events.ProvisionConfig{DuplicateWindow: window})
		b.startArbiter(arbiterCfg)
		v := vote("v-alice", "alice", contracts.DecisionApprove)
		rec := terminal(t, v)
		redelivered(t, b, v, func() {
			// What the crashed replica published, long enough ago that the
			// stream no longer de-duplicates its message id.
			d := contracts.Decided{
				Spec: contracts.SpecDecided, EventID: eventID, Status: rec.Status, Agent: rec.Request.Run.Agent,
				RunID: rec.Request.Run.ID, ToolName: rec.Request.ToolCall.Name, Outcome: rec.Outcome, Revision: 1,
				DecidedAt: rec.Outcome.DecidedAt,
			}
			if _, err := events.Publish(context.Background(), b.js, contracts.DecidedSubject(eventID), d, "decided:"+eventID, nil); err != nil {
				t.Fatal(err)
			}
			b.waitDuplicateWindow()
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.kv.Create(context.Background(), eventID, data); err != nil {
				t.Fatal(err)
			}
		})
		if got := b.decidedEvents(eventID); len(got) != 1 {
			t.Fatalf("%d decided events, want the one already published: %+v", len(got), got)
		}
	})

	t.Run("resent vote and claim after the duplicate window", func(t *testing.T) {
		b := newBus(t, events.ProvisionConfig{DuplicateWindow: window})
		b.startArbiter(arbiterCfg)
		b.create(request(t))
		v := vote("v-alice", "alice", contracts.DecisionApprove)
		b.acks.wait(t, b.vote(v), "+ACK")
		claim := command("c1", contracts.CommandClaim, "billing", func(c *contracts.Command) { c.ClaimID = "claim-1" })
		b.acks.wait(t, b.command(claim), "+ACK")
		if got := b.decidedEvents(eventID); len(got) != 1 {
			t.Fatalf("%d decided events after the decision, want 1", len(got))
		}
		_, rev := b.record(eventID)
		b.waitDuplicateWindow()
		b.acks.wait(t, b.vote(v), "+ACK")
		b.acks.wait(t, b.command(claim), "+ACK")
		if got := b.decidedEvents(eventID); len(got) != 1 {
			t.Fatalf("%d decided events after resends, want 1: %+v", len(got), got)
		}
		if _, again := b.record(eventID); again != rev {
			t.Fatalf("resends wrote the record (revision %d → %d)", rev, again)
		}
	})
}

package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const wait = 20 * time.Second

// people is a small directory.
type people map[string]dispatch.Person

func (p people) Person(id string) (dispatch.Person, bool) { v, ok := p[id]; return v, ok }
func (p people) BySlackID(s string) (dispatch.Person, bool) {
	for _, v := range p {
		if v.SlackUserID == s {
			return v, true
		}
	}
	return dispatch.Person{}, false
}
func (p people) ByEmail(a string) (dispatch.Person, bool) {
	for _, v := range p {
		if v.Email == a {
			return v, true
		}
	}
	return dispatch.Person{}, false
}
func (p people) Members(g string) ([]string, bool) {
	if g == "finance" {
		return []string{"alice", "bob"}, true
	}
	return nil, false
}

var directory = people{
	"alice": {ID: "alice", Email: "alice@example.com", SlackUserID: "U0ALICE001"},
	"bob":   {ID: "bob", Email: "bob@example.com", SlackUserID: "U0BOB00001"},
	"carol": {ID: "carol", Email: "carol@example.com"},
}

// call is one Notify or Update a test channel received.
type call struct {
	Update bool
	N      notifier.Notification
}

// channel is a test channel: behave decides each call's result; every call
// is recorded and announced on calls.
type channel struct {
	name   string
	behave func(ctx context.Context, c call, attempt int) (string, error)
	mu     sync.Mutex
	log    []call
	calls  chan call
}

func newChannel(name string, behave func(ctx context.Context, c call, attempt int) (string, error)) *channel {
	if behave == nil {
		behave = func(_ context.Context, c call, _ int) (string, error) {
			return "ref-" + c.N.Target.Address, nil
		}
	}
	return &channel{name: name, behave: behave, calls: make(chan call, 1000)}
}

func (c *channel) Name() string { return c.name }

func (c *channel) do(ctx context.Context, cl call) (notifier.Receipt, error) {
	c.mu.Lock()
	attempt := 1
	for _, old := range c.log {
		if old.Update == cl.Update && old.N.IdempotencyKey() == cl.N.IdempotencyKey() {
			attempt++
		}
	}
	c.log = append(c.log, cl)
	c.mu.Unlock()
	c.calls <- cl
	ref, err := c.behave(ctx, cl, attempt)
	if err != nil {
		return notifier.Receipt{}, err
	}
	return notifier.Receipt{Ref: ref}, nil
}

func (c *channel) Notify(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	return c.do(ctx, call{N: n})
}

func (c *channel) Update(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	return c.do(ctx, call{Update: true, N: n})
}

// count returns how many calls reached address (Notify or Update).
func (c *channel) count(address string, update bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, cl := range c.log {
		if cl.N.Target.Address == address && cl.Update == update {
			n++
		}
	}
	return n
}

type env struct {
	t   *testing.T
	srv *eventstest.Server
	js  jetstream.JetStream
	// clock, when set, is the arbiters' clock and the server's scheduler.
	clock *countersigntest.Clock

	mu       sync.Mutex
	receipts []notifier.Receipt
	taken    []bool
	more     chan struct{} // closed and replaced when a receipt arrives
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, nil)
}

// newEnvOn is newEnv with its arbiters on clock, which plays the server's
// scheduler for their timers (nil: the wall clock and the server's own).
func newEnvOn(t *testing.T, clock *countersigntest.Clock) *env {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, js: js, clock: clock, more: make(chan struct{})}
	if clock != nil {
		clock.Attach(js)
	}
	// Receipts as the stream stored them (an ordered consumer sees a
	// message once it is stored; a plain subscription could see it before,
	// and a test reading the stored receipts next would find fewer).
	cons, err := js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.SubjectNotifyPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var r notifier.Receipt
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			t.Errorf("receipt: %v", err)
			return
		}
		e.mu.Lock()
		e.receipts = append(e.receipts, r)
		e.taken = append(e.taken, false)
		close(e.more)
		e.more = make(chan struct{})
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Policies: refundsPolicy(t), Now: e.now()})
	return e
}

// now is the env's clock for its components (nil: the wall clock).
func (e *env) now() func() time.Time {
	if e.clock == nil {
		return nil
	}
	return e.clock.Now
}

// start runs a dispatcher until the returned stop is called (or the test ends).
func (e *env) start(cfg dispatch.Config) (stop func()) {
	e.t.Helper()
	cfg.JS = e.srv.JetStreamAs(embedded.RoleNotifier)
	if cfg.Now == nil {
		cfg.Now = e.now()
	}
	if cfg.People == nil {
		cfg.People = directory
	}
	if cfg.Retry.Initial == 0 {
		cfg.Retry.Initial = time.Millisecond
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := dispatch.New(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			// Stopped before it had created its consumers (a quick test on
			// a loaded machine), Run ends with the cancellation: not a fault.
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				e.t.Errorf("dispatcher: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// refundsPolicy is the policy request() was decided by, which the arbiter
// checks each request against.
func refundsPolicy(t *testing.T) arbiter.Policies {
	t.Helper()
	p, err := policy.Parse([]byte(`
version: v1
rules:
  - name: refunds
    tools: [stripe.refund]
    action: require_approval
`))
	if err != nil {
		t.Fatal(err)
	}
	return arbiter.Policies{p}
}

func request(channels ...string) contracts.ApprovalRequested {
	args := json.RawMessage(`{"amount":120,"currency":"EUR"}`)
	sum, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(), Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "run-1", Agent: "billing", RequestedBy: "erin"},
		ToolCall: &contracts.ToolCall{ID: "c1", Name: "stripe.refund", Arguments: args, ArgumentsSHA256: sum},
		Risk:     contracts.RiskHigh, Summary: "refund 120 EUR",
		Policy:     contracts.PolicyRef{Rule: "refunds", Version: "v1"},
		Quorum:     contracts.Quorum{Required: 1, Approvers: []string{"alice", "bob"}, Veto: true, Order: contracts.OrderAny},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		Channels:         channels,
		ExpiresAt:        now.Add(time.Hour), OnTimeout: contracts.OnTimeoutReject, CreatedAt: now,
	}
}

func (e *env) publish(req contracts.ApprovalRequested) {
	e.t.Helper()
	if _, err := events.Publish(context.Background(), e.js, contracts.ToolRequestedSubject(req.Run.Agent), req, req.EventID, nil); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) vote(id, approver, decision string) {
	e.t.Helper()
	v := contracts.Vote{Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: id, Decision: decision,
		Approver: contracts.Approver{ID: approver, Via: contracts.ViaAPI}, DecidedAt: time.Now().UTC()}
	if _, err := events.Publish(context.Background(), e.js, contracts.ResolvedSubject(id), v, v.VoteID, nil); err != nil {
		e.t.Fatal(err)
	}
}

// receipt waits for a receipt that matches and was not returned before.
func (e *env) receipt(what string, match func(notifier.Receipt) bool) notifier.Receipt {
	e.t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		e.mu.Lock()
		for i, r := range e.receipts {
			if !e.taken[i] && match(r) {
				e.taken[i] = true
				e.mu.Unlock()
				return r
			}
		}
		more := e.more
		e.mu.Unlock()
		select {
		case <-more:
		case <-timer.C:
			e.t.Fatalf("no receipt: %s", what)
		}
	}
}

// receiptsFor collects n receipts of event id (any order).
func (e *env) receiptsFor(id string, n int) map[string]notifier.Receipt {
	e.t.Helper()
	out := map[string]notifier.Receipt{}
	for len(out) < n {
		r := e.receipt(fmt.Sprintf("%d receipts of %s, have %d", n, id, len(out)), func(r notifier.Receipt) bool { return r.EventID == id })
		out[r.Channel+" "+r.Target+" "+r.Kind] = r
	}
	return out
}

func (e *env) waitDecided(id string) {
	e.t.Helper()
	e.waitRecord(id, func(r contracts.Record) bool { return r.Terminal() })
}

// waitRecord waits until the record of id satisfies cond.
func (e *env) waitRecord(id string, cond func(contracts.Record) bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case en := <-w.Updates():
			if en == nil {
				continue
			}
			var rec contracts.Record
			if err := json.Unmarshal(en.Value(), &rec); err != nil {
				e.t.Fatal(err)
			}
			if cond(rec) {
				return
			}
		case <-ctx.Done():
			e.t.Fatalf("record %s never reached the state waited for", id)
		}
	}
}

func TestTargetsResolveEveryRouteKind(t *testing.T) {
	req := request()
	routes := []string{"inbox", "slack", "slack:#payments", "slack:@carol", "slack:@U0BOB00001", "email:group:finance",
		"email:ops@example.com", "email:carol", "webhook:audit", "webhook", "email:group:nosuch", "sms:1", "email"}
	got, problems := dispatch.Targets(&req, routes, directory, []string{"audit", "siem"})
	want := []notifier.Target{
		{Channel: "slack", Address: "U0ALICE001", Approver: "alice"},
		{Channel: "slack", Address: "U0BOB00001", Approver: "bob"},
		{Channel: "slack", Address: "#payments"},
		{Channel: "email", Address: "alice@example.com", Approver: "alice"},
		{Channel: "email", Address: "bob@example.com", Approver: "bob"},
		{Channel: "email", Address: "ops@example.com"},
		{Channel: "email", Address: "carol@example.com", Approver: "carol"},
		{Channel: "webhook", Address: "audit"},
		{Channel: "webhook", Address: "siem"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("targets:\n got %v\nwant %v", got, want)
	}
	var reasons []string
	for _, p := range problems {
		reasons = append(reasons, p.Route+": "+p.Reason)
	}
	wantProblems := []string{
		"slack:@carol: carol has no Slack user id in the directory",
		`email:group:nosuch: no group "nosuch" in the directory`,
		`sms:1: channel "sms:1": unknown channel "sms" (slack, email, push, webhook, inbox)`,
	}
	if fmt.Sprint(reasons) != fmt.Sprint(wantProblems) {
		t.Errorf("problems:\n got %q\nwant %q", reasons, wantProblems)
	}
	anyone := request()
	anyone.Quorum.Approvers = nil
	if _, p := dispatch.Targets(&anyone, []string{"email"}, directory, nil); len(p) != 1 {
		t.Errorf("bare email without approvers: problems %v, want one", p)
	}
}

func TestRetryPolicyWaitsGrowToTheCap(t *testing.T) {
	p := dispatch.RetryPolicy{Initial: time.Second, Multiplier: 4, Max: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 4 * time.Second, 3: 16 * time.Second, 4: 30 * time.Second, 9: 30 * time.Second} {
		if got := p.Wait(n); got != want {
			t.Errorf("Wait(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestDeliversToEveryTargetOnceWithReceipts(t *testing.T) {
	e := newEnv(t)
	slack, email, hook := newChannel("slack", nil), newChannel("email", nil), newChannel("webhook", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack, email, hook}, Endpoints: []string{"audit"}})
	req := request("slack:#payments", "email", "webhook:audit", "inbox")
	e.publish(req)
	got := e.receiptsFor(req.EventID, 4)
	for _, k := range []string{"slack #payments requested", "email alice@example.com requested", "email bob@example.com requested", "webhook audit requested"} {
		r, ok := got[k]
		if !ok {
			t.Fatalf("no receipt %q in %v", k, got)
		}
		if r.Status != notifier.ReceiptDelivered || r.Ref != "ref-"+r.Target || r.Spec != contracts.SpecNotifyReceipt {
			t.Errorf("receipt %q = %+v", k, r)
		}
	}
	if r := got["email alice@example.com requested"]; r.Approver != "alice" {
		t.Errorf("email receipt approver = %q, want alice", r.Approver)
	}
	// The stored receipts are what the next delivery consults.
	stored, err := dispatch.Receipts(context.Background(), e.js, req.EventID)
	if err != nil || len(stored) != 4 {
		t.Fatalf("stored receipts: %d, %v", len(stored), err)
	}
	if slack.count("#payments", false) != 1 || email.count("alice@example.com", false) != 1 || hook.count("audit", false) != 1 {
		t.Errorf("calls: slack %d, email %d, webhook %d; want one each", slack.count("#payments", false), email.count("alice@example.com", false), hook.count("audit", false))
	}
}

func TestOutcomeUpdatesEveryTargetThatShowedTheRequest(t *testing.T) {
	e := newEnv(t)
	slack, email := newChannel("slack", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack, email}})
	req := request("slack:#payments", "email:alice")
	e.publish(req)
	e.receiptsFor(req.EventID, 2)
	e.vote(req.EventID, "bob", contracts.DecisionApprove)
	got := e.receiptsFor(req.EventID, 2)
	for _, k := range []string{"slack #payments decided", "email alice@example.com decided"} {
		if r, ok := got[k]; !ok || r.Status != notifier.ReceiptDelivered {
			t.Fatalf("no delivered %q receipt in %v", k, got)
		}
	}
	for _, c := range []*channel{slack, email} {
		c.mu.Lock()
		for _, cl := range c.log {
			if !cl.Update {
				continue
			}
			if cl.N.Kind != notifier.KindDecided || cl.N.Record == nil || cl.N.Record.Status != contracts.StatusApproved {
				t.Errorf("%s update: kind %q record %+v", c.name, cl.N.Kind, cl.N.Record)
			}
			if cl.N.Ref != "ref-"+cl.N.Target.Address {
				t.Errorf("%s update to %s has ref %q, want the request's receipt ref", c.name, cl.N.Target.Address, cl.N.Ref)
			}
			if line := notifier.OutcomeLine(cl.N.Record); line != "Approved by bob via api, 1 of 1" {
				t.Errorf("outcome line %q", line)
			}
		}
		c.mu.Unlock()
	}
}

func TestRestartedNotifierDoesNotPostTwiceWhereAReceiptExists(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	// First life: Slack delivers, email hangs until the process is killed.
	slack1 := newChannel("slack", nil)
	email1 := newChannel("email", func(ctx context.Context, _ call, _ int) (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-release:
			return "", errors.New("released")
		}
	})
	stop := e.start(dispatch.Config{Channels: []notifier.Channel{slack1, email1}})
	req := request("slack:#payments", "email:alice")
	e.publish(req)
	e.receipt("slack delivered", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Channel == "slack" })
	<-email1.calls // the email delivery is under way
	stop()         // killed mid-delivery
	defer close(release)

	slack2, email2 := newChannel("slack", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack2, email2}})
	r := e.receipt("email delivered after restart", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Channel == "email" })
	if r.Status != notifier.ReceiptDelivered {
		t.Fatalf("email receipt %+v", r)
	}
	if n := slack2.count("#payments", false); n != 0 {
		t.Errorf("the restarted notifier posted to Slack again (%d times) although a receipt existed", n)
	}
	if n := slack1.count("#payments", false) + slack2.count("#payments", false); n != 1 {
		t.Errorf("Slack posts in all: %d, want 1", n)
	}
}

func TestChannelThatIsDownDoesNotDelayOthers(t *testing.T) {
	e := newEnv(t)
	down := make(chan struct{})
	defer close(down)
	slack := newChannel("slack", func(ctx context.Context, _ call, _ int) (string, error) {
		select { // hangs like a dead endpoint, until the test ends
		case <-ctx.Done():
			return "", ctx.Err()
		case <-down:
			return "", errors.New("down")
		}
	})
	email := newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack, email}, Concurrency: 4})
	first := request("slack:#payments", "email:alice")
	e.publish(first)
	<-slack.calls
	e.receipt("email of the first request while Slack hangs", func(r notifier.Receipt) bool {
		return r.EventID == first.EventID && r.Channel == "email"
	})
	// Later requests are not held up behind the hanging one either.
	for i := 0; i < 5; i++ {
		req := request("slack:#payments", "email:bob")
		e.publish(req)
		e.receipt("email of a later request", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Channel == "email" })
	}
}

func TestTransientFailuresAreRetriedUntilDelivered(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	hook := newChannel("webhook", func(_ context.Context, _ call, attempt int) (string, error) {
		if attempt <= 2 {
			return "", errors.New("503 from receiver")
		}
		return "whid", nil
	})
	e.start(dispatch.Config{Channels: []notifier.Channel{hook}, Registerer: reg})
	req := request("webhook:audit")
	e.publish(req)
	r := e.receipt("delivered", func(r notifier.Receipt) bool { return r.EventID == req.EventID })
	if r.Status != notifier.ReceiptDelivered || r.Ref != "whid" {
		t.Fatalf("receipt %+v", r)
	}
	if n := hook.count("audit", false); n != 3 {
		t.Errorf("attempts %d, want 3", n)
	}
	if got := counter(t, reg, "countersign_notification_attempts_total", map[string]string{"channel": "webhook", "result": "transient"}); got != 2 {
		t.Errorf("transient attempts metric = %v, want 2", got)
	}
	if got := counter(t, reg, "countersign_notifications_total", map[string]string{"channel": "webhook", "kind": "requested", "result": "delivered"}); got != 1 {
		t.Errorf("delivered metric = %v, want 1", got)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	e := newEnv(t)
	var first time.Time
	var gap time.Duration
	hook := newChannel("webhook", func(_ context.Context, _ call, attempt int) (string, error) {
		if attempt == 1 {
			first = time.Now()
			return "", notifier.RetryAfter(300*time.Millisecond, errors.New("429"))
		}
		gap = time.Since(first)
		return "ok", nil
	})
	e.start(dispatch.Config{Channels: []notifier.Channel{hook}})
	req := request("webhook:audit")
	e.publish(req)
	e.receipt("delivered", func(r notifier.Receipt) bool { return r.EventID == req.EventID })
	// A lower bound, which no machine's slowness can break: the second
	// attempt came no sooner than the receiver asked.
	if gap < 300*time.Millisecond {
		t.Errorf("second attempt %s after the first, before the 300ms Retry-After", gap)
	}
}

func deadLetters(t *testing.T, js jetstream.JetStream, stream string) []dispatch.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, contracts.StreamDeadLetter, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.DeadLetterSubject(stream)}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []dispatch.DeadLetter
	for i := uint64(0); i < info.NumPending; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		var dl dispatch.DeadLetter
		if err := json.Unmarshal(m.Data(), &dl); err != nil {
			t.Fatal(err)
		}
		out = append(out, dl)
	}
	return out
}

func TestPermanentFailureGivesFailedReceiptAndDeadLetter(t *testing.T) {
	e := newEnv(t)
	slack := newChannel("slack", func(context.Context, call, int) (string, error) {
		return "", fmt.Errorf("%w: channel_not_found", notifier.ErrPermanent)
	})
	e.start(dispatch.Config{Channels: []notifier.Channel{slack}})
	req := request("slack:#gone")
	e.publish(req)
	r := e.receipt("failed", func(r notifier.Receipt) bool { return r.EventID == req.EventID })
	if r.Status != notifier.ReceiptFailed || !r.Permanent || r.Error == "" {
		t.Fatalf("receipt %+v", r)
	}
	if n := slack.count("#gone", false); n != 1 {
		t.Errorf("a permanent failure was tried %d times, want 1", n)
	}
	dls := deadLetters(t, e.js, contracts.StreamRequests)
	if len(dls) != 1 || dls[0].Receipt.IdempotencyKey != r.IdempotencyKey || dls[0].Attempts != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
}

func TestRetriesRunOutIntoAFailedReceipt(t *testing.T) {
	e := newEnv(t)
	hook := newChannel("webhook", func(context.Context, call, int) (string, error) { return "", errors.New("connection refused") })
	e.start(dispatch.Config{Channels: []notifier.Channel{hook}, Retry: dispatch.RetryPolicy{Attempts: 3}})
	req := request("webhook:audit")
	e.publish(req)
	r := e.receipt("failed", func(r notifier.Receipt) bool { return r.EventID == req.EventID })
	if r.Status != notifier.ReceiptFailed || r.Permanent {
		t.Fatalf("receipt %+v", r)
	}
	if n := hook.count("audit", false); n != 3 {
		t.Errorf("attempts %d, want 3", n)
	}
	if dls := deadLetters(t, e.js, contracts.StreamRequests); len(dls) != 1 || dls[0].Attempts != 3 {
		t.Fatalf("dead letters %+v", dls)
	}
}

func TestUnroutableAndUnconfiguredAreRecorded(t *testing.T) {
	e := newEnv(t)
	e.start(dispatch.Config{Channels: []notifier.Channel{newChannel("email", nil)}})
	req := request("email:group:nosuch", "slack:#ops", "email:alice")
	e.publish(req)
	got := e.receiptsFor(req.EventID, 3)
	if r := got["email email:group:nosuch requested"]; r.Status != notifier.ReceiptFailed || !r.Permanent {
		t.Errorf("unroutable: %+v (all %v)", r, got)
	}
	if r := got["slack #ops requested"]; r.Status != notifier.ReceiptFailed || r.Error == "" {
		t.Errorf("unconfigured: %+v", r)
	}
	if r := got["email alice@example.com requested"]; r.Status != notifier.ReceiptDelivered {
		t.Errorf("configured: %+v", r)
	}
}

func TestTwoReplicasDeliverEachTargetOnce(t *testing.T) {
	e := newEnv(t)
	a, b := newChannel("email", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{a}})
	e.start(dispatch.Config{Channels: []notifier.Channel{b}})
	var ids []string
	for i := 0; i < 20; i++ {
		req := request("email:alice")
		ids = append(ids, req.EventID)
		e.publish(req)
	}
	for _, id := range ids {
		e.receiptsFor(id, 1)
	}
	if n := a.count("alice@example.com", false) + b.count("alice@example.com", false); n != 20 {
		t.Errorf("deliveries %d, want 20 (one per request)", n)
	}
}

func TestRequestDecidedBeforeDeliveryGetsTheOutcomeOnly(t *testing.T) {
	e := newEnv(t)
	req := request("email:alice", "webhook:audit")
	e.publish(req)
	e.waitDecided(func() string { e.vote(req.EventID, "alice", contracts.DecisionApprove); return req.EventID }())
	email, hook := newChannel("email", nil), newChannel("webhook", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{email, hook}, DecidedWait: time.Millisecond})
	// People are not asked about a decided request; they hear the outcome.
	// Webhooks, for automation and audit, get the request event as well.
	got := e.receiptsFor(req.EventID, 3)
	for _, k := range []string{"email alice@example.com decided", "webhook audit requested", "webhook audit decided"} {
		if r, ok := got[k]; !ok || r.Status != notifier.ReceiptDelivered {
			t.Errorf("no delivered %q receipt in %v", k, got)
		}
	}
	if n := email.count("alice@example.com", false); n != 0 {
		t.Errorf("alice was asked %d times about a decided request", n)
	}
	email.mu.Lock()
	defer email.mu.Unlock()
	for _, cl := range email.log {
		if cl.Update && (cl.N.Ref != "" || cl.N.Record == nil || cl.N.Record.Status != contracts.StatusApproved) {
			t.Errorf("outcome alone: ref %q record %+v", cl.N.Ref, cl.N.Record)
		}
	}
}

// counter reads one counter of reg by its labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// startArbiter runs one more arbiter replica until the test ends.
func (e *env) startArbiter() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	arb, err := arbiter.New(ctx, arbiter.Config{JS: e.srv.JetStreamAs(embedded.RoleArbiter), Policies: refundsPolicy(e.t), Now: e.now()})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- arb.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("arbiter: %v", err)
		}
	})
}

func TestRemindersAndEscalationReachTheRightPeopleOnceWithTwoReplicas(t *testing.T) {
	clock := countersigntest.NewClock(time.Now())
	e := newEnvOn(t, clock)
	e.startArbiter() // two arbiters
	a, b := newChannel("email", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{a}})
	e.start(dispatch.Config{Channels: []notifier.Channel{b}})
	req := request("email")
	req.Quorum.Required = 2
	req.Reminders = []string{"10m", "20m"}
	req.Escalation = []contracts.EscalationTier{{After: "10m", Approvers: []string{"carol"}, Channels: []string{"email"}}}
	req.CreatedAt = clock.Now().UTC()
	req.ExpiresAt = req.CreatedAt.Add(time.Hour)
	e.publish(req)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for kind, after := range map[string]time.Duration{"remind-1": 10 * time.Minute, "escalate-1": 10 * time.Minute, "remind-2": 20 * time.Minute} {
		if err := clock.WaitScheduled(ctx, req.EventID, kind, req.CreatedAt.Add(after)); err != nil {
			t.Fatal(err)
		}
	}
	e.receiptsFor(req.EventID, 2) // alice and bob were asked
	e.vote(req.EventID, "alice", contracts.DecisionApprove)
	e.waitRecord(req.EventID, func(r contracts.Record) bool { return len(r.Votes) == 1 })
	// Ten minutes pass: the first reminder and carol's tier; ten more: the
	// second reminder.
	if err := clock.Advance(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}

	// Each reminder reaches bob, who has not voted, and carol once her tier
	// is reached; alice, who voted, is left alone.
	esc := e.receipt("carol's escalation", func(r notifier.Receipt) bool {
		return r.EventID == req.EventID && r.Kind == notifier.KindEscalation(1)
	})
	if esc.Target != "carol@example.com" || esc.Approver != "carol" || esc.Status != notifier.ReceiptDelivered {
		t.Fatalf("escalation receipt %+v", esc)
	}
	if err := clock.Advance(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	r2 := map[string]bool{}
	for len(r2) < 2 {
		r := e.receipt("second reminder", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Kind == notifier.KindReminder(2) })
		r2[r.Target] = true
	}
	if !r2["bob@example.com"] || !r2["carol@example.com"] {
		t.Errorf("second reminder went to %v, want bob and carol", r2)
	}
	// Decide, and let every target that was shown the request hear of it.
	e.vote(req.EventID, "carol", contracts.DecisionApprove)
	decided := map[string]bool{}
	for len(decided) < 3 { // alice, bob and carol hear of the outcome
		r := e.receipt("outcome receipts", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Kind == notifier.KindDecided })
		decided[r.Target] = true
	}

	count := func(addr, kind string) int {
		n := 0
		for _, c := range []*channel{a, b} {
			c.mu.Lock()
			for _, cl := range c.log {
				if cl.N.Target.Address == addr && cl.N.Kind == kind {
					n++
				}
			}
			c.mu.Unlock()
		}
		return n
	}
	for _, c := range []struct {
		addr, kind string
		want       int
	}{
		{"bob@example.com", notifier.KindReminder(1), 1},
		{"bob@example.com", notifier.KindReminder(2), 1},
		{"alice@example.com", notifier.KindReminder(1), 0},
		{"alice@example.com", notifier.KindReminder(2), 0},
		{"carol@example.com", notifier.KindEscalation(1), 1},
		{"carol@example.com", notifier.KindReminder(2), 1},
		{"carol@example.com", notifier.KindDecided, 1},
		{"bob@example.com", notifier.KindDecided, 1},
	} {
		if got := count(c.addr, c.kind); got != c.want {
			t.Errorf("%s %s: %d deliveries, want %d", c.addr, c.kind, got, c.want)
		}
	}
}

// Attack: a request published with the orchestrator's credential that the
// arbiter refuses (here, naming a policy version never applied) reaches no
// one: the notifier waits for the arbiter's record and tells nobody about
// a refused request, not even webhooks.
func TestForgedRequestNotifiesNobody(t *testing.T) {
	e := newEnv(t)
	forged := request("email:alice", "webhook:audit")
	forged.Policy.Version = "v0-never-applied"
	e.publish(forged)
	e.waitRecord(forged.EventID, func(r contracts.Record) bool { return r.Terminal() })
	honest := request("email:alice")
	e.publish(honest)
	email, hook := newChannel("email", nil), newChannel("webhook", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{email, hook}})
	e.receiptsFor(honest.EventID, 1)
	// Every request handled: the notifier's consumer has nothing pending.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		c, err := e.js.Consumer(ctx, contracts.StreamRequests, dispatch.DurableRequests)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the notifier did not handle both requests: %+v", info)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := email.count("alice@example.com", false); n != 1 {
		t.Errorf("alice was asked %d times, want once (the honest request only)", n)
	}
	if n := hook.count("audit", false); n != 0 {
		t.Errorf("the webhook got the forged request %d times", n)
	}
	if got := e.receiptsFor(forged.EventID, 0); len(got) != 0 {
		t.Errorf("receipts for the forged request: %v", got)
	}
}

// A notification its channel holds (a person's quiet hours) gets no
// receipt while held; the bus message is handed back until the hold ends,
// when the held target is told and the others, told at once, are not told
// again.
func TestHeldNotificationIsSentWhenItsHoldEnds(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	heldUntil := time.Now().Add(300 * time.Millisecond)
	email := newChannel("email", func(_ context.Context, c call, attempt int) (string, error) {
		if c.N.Target.Address == "alice@example.com" && attempt == 1 {
			return "", notifier.HeldUntil(heldUntil, errors.New("held by alice's quiet hours"))
		}
		return "ref-" + c.N.Target.Address, nil
	})
	e.start(dispatch.Config{Channels: []notifier.Channel{email}, Registerer: reg})
	req := request("email")
	e.publish(req)
	bob := e.receipt("bob's, at once", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Target == "bob@example.com" })
	alice := e.receipt("alice's, after her hold", func(r notifier.Receipt) bool { return r.EventID == req.EventID && r.Target == "alice@example.com" })
	if bob.Status != notifier.ReceiptDelivered || alice.Status != notifier.ReceiptDelivered {
		t.Fatalf("receipts: bob %+v, alice %+v; want both delivered", bob, alice)
	}
	if alice.At.Before(heldUntil) {
		t.Errorf("alice was told at %s, before her hold ended at %s", alice.At, heldUntil)
	}
	if a, b := email.count("alice@example.com", false), email.count("bob@example.com", false); a != 2 || b != 1 {
		t.Errorf("calls: alice %d (want the held one and the one after), bob %d (want 1)", a, b)
	}
	if got := counter(t, reg, "countersign_notifications_total", map[string]string{"channel": "email", "kind": "requested", "result": "quiet"}); got != 1 {
		t.Errorf("quiet metric = %v, want 1", got)
	}
	stored, err := dispatch.Receipts(context.Background(), e.js, req.EventID)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored receipts: %d, %v; want one per person", len(stored), err)
	}
}

package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator/history"
	"github.com/countersign/countersign/orchestrator/policy"
)

// bus starts a server with the contract's streams.
func bus(t *testing.T) *eventstest.Server { return benchBus(t) }

func benchBus(tb testing.TB) *eventstest.Server {
	tb.Helper()
	srv := eventstest.NewServer(tb)
	srv.Provision(srv.JetStream())
	return srv
}

// open opens a store as the orchestrator role would.
func open(t *testing.T, srv *eventstest.Server, cfg history.Config) *history.Store {
	t.Helper()
	return openAs(t, srv, cfg)
}

func benchOpen(tb testing.TB, srv *eventstest.Server) *history.Store {
	return openAs(tb, srv, history.Config{})
}

func openAs(tb testing.TB, srv *eventstest.Server, cfg history.Config) *history.Store {
	tb.Helper()
	cfg.JS = srv.JetStreamAs(embedded.RoleOrchestrator)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := history.Open(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func mustParse(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// review decides one call with p against s and returns the decision and
// the figures it read.
func review(t *testing.T, s *history.Store, p *policy.Policy, call history.Call) (policy.Decision, []contracts.HistoryFigure) {
	t.Helper()
	var d policy.Decision
	var figs []contracts.HistoryFigure
	err := s.Review(context.Background(), call, p.HistoryUse(), func(h policy.History) string {
		rec := &policy.Recorder{H: h}
		in := policy.Input{Run: call.Run, Tool: call.Tool, Arguments: call.Arguments, History: rec}
		d, figs = p.Evaluate(in), rec.Figures()
		return verdictOf(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, figs
}

func verdictOf(d policy.Decision) string {
	switch d.Action {
	case policy.ActionAllow:
		return contracts.HistoryAllowed
	case policy.ActionDeny:
		return contracts.HistoryDenied
	}
	return contracts.HistoryGated
}

const fivePerHour = `version: five
default: require_approval
rules:
  - name: too-many
    tools: [pay]
    when: 'history.count("pay", duration("1h")) >= 5'
    action: deny
  - name: pay
    tools: [pay]
    action: allow
`

// facts reads every fact of the stream in order.
func facts(t *testing.T, srv *eventstest.Server) []contracts.HistoryFact {
	t.Helper()
	ctx := context.Background()
	js := srv.JetStream()
	st, err := js.Stream(ctx, contracts.StreamHistory)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []contracts.HistoryFact
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var f contracts.HistoryFact
		if err := json.Unmarshal(m.Data, &f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestTwoGatesCountExactly: two gates on one bus review interleaved calls
// of one agent at the same time. Exactly five are allowed; every call saw
// the count of the allowed calls recorded before it; both gates, and a
// gate started afterwards, see the same history.
func TestTwoGatesCountExactly(t *testing.T) {
	srv := bus(t)
	p := mustParse(t, fivePerHour)
	gates := []*history.Store{open(t, srv, history.Config{}), open(t, srv, history.Config{})}
	run := contracts.Run{ID: "r", Agent: "payer", Tenant: "acme"}
	const perGate = 12
	saw := sync.Map{} // event id → count figure
	var wg sync.WaitGroup
	for g, s := range gates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGate {
				id := fmt.Sprintf("g%d-%d", g, i)
				d, figs := review(t, s, p, history.Call{ID: id, Tool: "pay", Run: run, Arguments: []byte(`{}`)})
				if len(figs) != 1 || d.Error != "" {
					t.Errorf("%s: figures %v, error %q", id, figs, d.Error)
					return
				}
				saw.Store(id, figs[0].Value)
			}
		}()
	}
	wg.Wait()
	all := facts(t, srv)
	if len(all) != 2*perGate {
		t.Fatalf("%d facts, want %d", len(all), 2*perGate)
	}
	allowed := 0
	for _, f := range all {
		v, _ := saw.Load(f.ID)
		if v != float64(allowed) {
			t.Errorf("%s saw %v allowed before it, the stream's order says %d", f.ID, v, allowed)
		}
		want := contracts.HistoryAllowed
		if allowed >= 5 {
			want = contracts.HistoryDenied
		}
		if f.Verdict != want {
			t.Errorf("%s: %s, want %s", f.ID, f.Verdict, want)
		}
		if f.Verdict == contracts.HistoryAllowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d allowed, want 5", allowed)
	}
	restarted := open(t, srv, history.Config{})
	for i, s := range append(gates, restarted) {
		_, figs := review(t, s, p, history.Call{ID: fmt.Sprintf("last-%d", i), Tool: "pay", Run: run})
		if figs[0].Value != 5 {
			t.Errorf("store %d counts %v, want 5", i, figs[0].Value)
		}
	}
}

// TestSumsScopesAndReviewsOnce: sums read the fields the policy names, per
// scope; a call reviewed again is one fact and never counts itself.
func TestSumsScopesAndReviewsOnce(t *testing.T) {
	srv := bus(t)
	p := mustParse(t, `version: sums
default: require_approval
rules:
  - name: big
    tools: ["pay*"]
    when: 'history.tenant.sum("pay*", "amount", duration("24h")) + double(args.amount) > 1000.0 || history.run.count("pay*", duration("1h")) > 2'
    action: require_approval
  - name: ok
    tools: ["pay*"]
    action: allow
`)
	s := open(t, srv, history.Config{})
	call := func(id, run, agent string, amount int) (policy.Decision, []contracts.HistoryFigure) {
		return review(t, s, p, history.Call{ID: id, Tool: "pay", Run: contracts.Run{ID: run, Agent: agent, Tenant: "acme"},
			Arguments: fmt.Appendf(nil, `{"amount": %d}`, amount)})
	}
	for i, c := range []struct {
		id, run, agent string
		amount         int
		rule           string
		figs           []float64 // the sum, then the run's count (unless the sum decides)
	}{
		{"a", "r1", "x", 400, "ok", []float64{0, 0}},
		{"b", "r2", "y", 500, "ok", []float64{400, 0}},
		{"a", "r1", "x", 400, "ok", []float64{500, 0}}, // "a" again: its own fact is left out
		{"c", "r2", "y", 50, "ok", []float64{900, 1}},
		{"d", "r2", "z", 1, "ok", []float64{950, 2}},
		{"e", "r2", "z", 3, "big", []float64{951, 3}},
		{"f", "r3", "z", 100, "big", []float64{954}},
	} {
		d, figs := call(c.id, c.run, c.agent, c.amount)
		var got []float64
		for _, f := range figs {
			got = append(got, f.Value)
		}
		if d.Rule != c.rule || fmt.Sprint(got) != fmt.Sprint(c.figs) {
			t.Errorf("call %d (%s): %s with %v, want %s with %v", i, c.id, d.Rule, got, c.rule, c.figs)
		}
	}
	if n := len(facts(t, srv)); n != 6 {
		t.Errorf("%d facts, want 6 (a reviewed twice is one)", n)
	}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestCapsFailClosed: beyond MaxPerScope the oldest fact is dropped, and a
// window that reaches back to it errors; a shorter one stays exact, and
// the policy takes the erroring condition both ways.
func TestCapsFailClosed(t *testing.T) {
	srv := bus(t)
	clk := &clock{t: time.Now()}
	p := mustParse(t, fivePerHour)
	s := open(t, srv, history.Config{Now: clk.now, MaxPerScope: 3})
	run := contracts.Run{ID: "r", Agent: "payer"}
	for i := range 4 {
		review(t, s, p, history.Call{ID: fmt.Sprint(i), Tool: "pay", Run: run})
		clk.add(10 * time.Minute)
	}
	d, _ := review(t, s, p, history.Call{ID: "5", Tool: "pay", Run: run})
	if d.Action != policy.ActionDeny || !strings.Contains(d.Error, history.ErrInexact.Error()) {
		t.Errorf("with a dropped fact in the window: %s (%q), want the strictest, deny, with the error", d.Action, d.Error)
	}
	clk.add(35 * time.Minute) // the dropped fact (at 0) is now older than the hour
	d, figs := review(t, s, p, history.Call{ID: "6", Tool: "pay", Run: run})
	if d.Error != "" || len(figs) != 1 || figs[0].Value != 2 {
		t.Errorf("after the dropped fact left the window: %s (%q), figures %+v, want a count of 2", d.Action, d.Error, figs)
	}
}

// TestApprovedFollowsDecisions: a gated call counts as approved once its
// approval is announced; an allowed call counts at once; a denied one
// never.
func TestApprovedFollowsDecisions(t *testing.T) {
	srv := bus(t)
	p := mustParse(t, `version: approved
default: require_approval
rules:
  - name: pay
    tools: [pay]
    when: 'history.run.approved("check*", duration("1h"))'
    action: allow
  - name: check
    tools: [check]
    action: require_approval
  - name: peek
    tools: [check_peek]
    action: allow
`)
	s := open(t, srv, history.Config{})
	run := contracts.Run{ID: "r", Agent: "payer"}
	pay := func(id string) float64 {
		_, figs := review(t, s, p, history.Call{ID: id, Tool: "pay", Run: run})
		return figs[0].Value
	}
	review(t, s, p, history.Call{ID: "chk", Tool: "check", Run: run})
	if v := pay("p1"); v != 0 {
		t.Fatalf("approved before the decision: %v", v)
	}
	data, _ := json.Marshal(contracts.Decided{Spec: contracts.SpecDecided, EventID: "chk", Status: contracts.StatusApproved,
		Agent: "payer", DecidedAt: time.Now()})
	if _, err := srv.JetStream().Publish(context.Background(), contracts.SubjectDecidedPrefix+"chk", data); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := history.WaitApproved(ctx, s, "chk"); err != nil {
		t.Fatal(err)
	}
	if v := pay("p2"); v != 1 {
		t.Errorf("approved after the decision: %v", v)
	}
	other := open(t, srv, history.Config{})
	review(t, other, p, history.Call{ID: "peek", Tool: "check_peek", Run: contracts.Run{ID: "r2", Agent: "payer"}})
	_, figs := review(t, other, p, history.Call{ID: "p3", Tool: "pay", Run: contracts.Run{ID: "r2", Agent: "payer"}})
	if figs[0].Value != 1 {
		t.Errorf("an allowed call is approved: %v", figs[0].Value)
	}
}

// TestOpenDoesNotWaitForTheHistory: a store opens at once on a long
// history and reads it in the background. Until it has, a figure asked for
// outside a review errors, never a partial count; a review whose policy
// reads the history waits for it and counts it all.
func TestOpenDoesNotWaitForTheHistory(t *testing.T) {
	srv := bus(t)
	ctx := context.Background()
	js := srv.JetStream()
	run := contracts.Run{ID: "r", Agent: "payer", Tenant: "acme"}
	const recorded = 3000
	now := time.Now().UTC()
	for i := range recorded {
		f := contracts.HistoryFact{Spec: contracts.SpecHistoryFact, ID: fmt.Sprintf("old-%d", i), Tool: "pay",
			Agent: run.Agent, Tenant: run.Tenant, RunID: run.ID, Verdict: contracts.HistoryAllowed, At: now}
		data, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync(contracts.HistorySubject(run.Tenant, run.ID, run.Agent), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("the recorded history was not stored")
	}

	late := open(t, srv, history.Config{})
	q := policy.HistoryQuery{Scope: contracts.HistoryScopeAgent, Func: policy.HistoryCount, Tools: "pay", Window: time.Hour}
	call := history.Call{ID: "new", Tool: "pay", Run: run}
	catchingUp := 0
	for {
		n, err := late.View(call).Figure(q)
		if errors.Is(err, history.ErrCatchingUp) {
			catchingUp++
			if err := late.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil || n != recorded {
			t.Fatalf("figure %v, %v after %d refusals while catching up; want %d", n, err, catchingUp, recorded)
		}
		break
	}
	if catchingUp == 0 {
		t.Log("the store had read the history before the first figure was asked for")
	}

	again := open(t, srv, history.Config{})
	d, figs := review(t, again, mustParse(t, fivePerHour), history.Call{ID: "newer", Tool: "pay", Run: run})
	if len(figs) != 1 || figs[0].Value != recorded || d.Rule != "too-many" {
		t.Fatalf("review on a store just opened: rule %q, figures %+v; want too-many with %d", d.Rule, figs, recorded)
	}
}

package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
	"github.com/countersign/countersign/services/inbox"
)

// clockStack is Countersign with every component reading one fake clock,
// so that a history of decisions spread over a day is made in no time.
type clockStack struct {
	*stack
	clock *countersigntest.Clock
}

func startClockStack(t *testing.T) *clockStack {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	clock := countersigntest.NewClock(time.Now())
	clock.Attach(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Now: clock.Now})
	pol := countersigntest.Policy(t, fleetPolicy)
	countersigntest.Trust(t, pol)
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Policy: orchestrator.StaticPolicy{P: pol}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	st := &stack{tokens: map[string]string{}}
	var tokens []api.Token
	// lead is a team lead who reads every request (viewer) and decides none.
	for _, u := range []struct{ name, role string }{
		{"agent", api.RoleAgent}, {"alice", api.RoleApprover}, {"bob", api.RoleApprover}, {"gina", api.RoleApprover}, {"lead", api.RoleViewer},
	} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		st.tokens[u.name] = tok
		subject := u.name
		if u.role == api.RoleAgent {
			subject = "agent:fleet"
		}
		tokens = append(tokens, api.Token{Name: u.name, Subject: subject, SHA256: hash, Roles: []string{u.role}})
	}
	reg := prometheus.NewRegistry()
	s, err := api.New(ctx, api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Tokens: tokens, Registerer: reg, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, inbox.Config{API: s, JS: srv.JetStreamAs(embedded.RoleAPI), Registerer: reg, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { _ = s.Close(); hs.CloseClientConnections(); hs.Close() })
	st.url = hs.URL
	return &clockStack{stack: st, clock: clock}
}

// apiCall sends an API request with the named token and decodes the answer into out.
func (st *stack) apiCall(t *testing.T, method, path, token, body string, out any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, st.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+st.tokens[token])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s as %s: %d %s", method, path, token, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// decision is one vote of the oversight history, after on the fake clock
// from the request's creation.
type decision struct {
	call     int
	approver string
	decision string
	after    time.Duration
}

// oversightHistory makes a day of decisions: alice approves critical
// deploys and high-risk refunds within seconds, bob takes minutes, gina
// hours, and two requests expire with nobody deciding them.
func oversightHistory(t *testing.T, st *clockStack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	deploy := func(id, service, version string) call {
		return call{ID: id, Name: "deploy.release", Arguments: json.RawMessage(fmt.Sprintf(`{"service":%q,"version":%q,"env":"production"}`, service, version))}
	}
	email := func(id, to string) call {
		return call{ID: id, Name: "email.send", Arguments: json.RawMessage(fmt.Sprintf(`{"to":%q,"subject":"Your refund"}`, to))}
	}
	migrate := func(id, m string) call {
		return call{ID: id, Name: "db.migrate", Arguments: json.RawMessage(fmt.Sprintf(`{"database":"orders","migration":%q}`, m))}
	}
	calls := []struct {
		agent string
		c     call
	}{
		{"deploy-bot", deploy("d1", "checkout", "v2.14.0")}, {"deploy-bot", deploy("d2", "search", "v1.9.2")},
		{"deploy-bot", deploy("d3", "payments", "v3.0.1")}, {"deploy-bot", deploy("d4", "auth", "v5.2.0")},
		{"deploy-bot", deploy("d5", "ledger", "v0.8.0")},
		{"billing-bot", refund("r1", 480, "Globex GmbH")}, {"billing-bot", refund("r2", 95, "Initech")},
		{"billing-bot", refund("r3", 990, "Umbrella plc")}, {"billing-bot", refund("r4", 60, "Hooli")},
		{"billing-bot", refund("r5", 240, "Stark Industries")},
		{"support-mailer", email("e1", "jane.doe@example.com")}, {"support-mailer", email("e2", "li.wei@example.com")},
		{"support-mailer", email("e3", "sam.lee@example.com")},
		{"db-migrator", migrate("m1", "0042_add_refund_reason")}, {"db-migrator", migrate("m2", "0043_index_orders")},
		{"db-migrator", migrate("m3", "0044_drop_legacy")},
	}
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = st.pending(t, ctx, c.agent, "run-"+c.c.ID, c.c)
	}
	created := st.clock.Now()
	votes := []decision{
		{0, "alice", "approve", 3 * time.Second}, {1, "alice", "approve", 4 * time.Second}, {2, "alice", "approve", 5 * time.Second},
		{3, "alice", "approve", 6 * time.Second}, {4, "bob", "approve", 7 * time.Minute},
		{5, "bob", "approve", 2 * time.Minute}, {6, "bob", "approve", 4 * time.Minute}, {7, "bob", "reject", 9 * time.Minute},
		{8, "alice", "approve", 8 * time.Second}, {9, "alice", "approve", 40 * time.Second},
		{10, "bob", "respond", 15 * time.Minute}, {11, "alice", "approve", time.Minute},
		{13, "gina", "approve", 2 * time.Hour}, {14, "gina", "approve", 5 * time.Hour},
	}
	slices.SortStableFunc(votes, func(a, b decision) int { return int(a.after - b.after) })
	for _, v := range votes {
		if d := created.Add(v.after).Sub(st.clock.Now()); d > 0 {
			if err := st.clock.Advance(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		body := fmt.Sprintf(`{"decision":%q}`, v.decision)
		if v.decision != "approve" {
			body = fmt.Sprintf(`{"decision":%q,"comment":"not like this"}`, v.decision)
		}
		st.apiCall(t, "POST", "/v1/approvals/"+ids[v.call]+"/votes", v.approver, body, nil)
	}
	// e3 and m3 expire a day after they were made, nobody having decided.
	for _, i := range []int{12, 15} {
		if err := st.clock.WaitScheduled(ctx, ids[i], "expire", created.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.clock.Advance(ctx, created.Add(24*time.Hour).Sub(st.clock.Now())); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{12, 15} {
		var ans struct {
			Record struct {
				Status string `json:"status"`
			} `json:"record"`
		}
		for ans.Record.Status != "expired" {
			if ctx.Err() != nil {
				t.Fatalf("%s did not expire", ids[i])
			}
			st.apiCall(t, "GET", "/v1/approvals/"+ids[i]+"?wait=10s", "lead", "", &ans)
		}
	}
}

// shownRow is a table row of the oversight page as the browser reads it.
type shownRow struct {
	Name      string `json:"name"`
	Requests  string `json:"requests"`
	Decisions string `json:"decisions"`
	Rate      string `json:"approval_rate"`
	Median    string `json:"median"`
	P90       string `json:"p90"`
	Fast      string `json:"fast_high_risk"`
	Expired   string `json:"expired_undecided"`
}

const readTable = `(id) => Array.from(document.querySelectorAll("#" + id + " tbody tr")).map((tr) => {
  const v = (k) => { const td = tr.querySelector("[data-k=" + k + "]"); return td.hasAttribute("data-v") ? td.getAttribute("data-v") : td.textContent.trim(); };
  return {name: tr.getAttribute("data-name"), requests: v("requests"), decisions: v("decisions"), approval_rate: v("approval_rate"),
    median: v("median"), p90: v("p90"), fast_high_risk: v("fast_high_risk"), expired_undecided: v("expired_undecided")};
})`

// sameNumber reports whether the page's text shows the JSON's number (""
// for none).
func sameNumber(shown string, want *float64) bool {
	if want == nil {
		return shown == ""
	}
	var got float64
	if _, err := fmt.Sscan(shown, &got); err != nil {
		return false
	}
	return math.Abs(got-*want) < 1e-9
}

func checkRows(t *testing.T, table string, shown []shownRow, names []string, stats []oversight.Stats) {
	t.Helper()
	if len(shown) != len(stats) {
		t.Fatalf("%s: %d rows shown, %d in the JSON: %+v", table, len(shown), len(stats), shown)
	}
	for i, s := range stats {
		r := shown[i]
		var median, p90 *float64
		if s.TimeToDecide != nil {
			median, p90 = &s.TimeToDecide.Median, &s.TimeToDecide.P90
		}
		if r.Name != names[i] || r.Requests != fmt.Sprint(s.Requests) || r.Decisions != fmt.Sprint(s.Decisions) ||
			!sameNumber(r.Rate, s.ApprovalRate) || !sameNumber(r.Median, median) || !sameNumber(r.P90, p90) ||
			r.Fast != fmt.Sprint(s.FastHighRisk) || r.Expired != fmt.Sprint(s.ExpiredUndecided) {
			t.Errorf("%s row %d: shown %+v, JSON %s %+v", table, i, r, names[i], s)
		}
	}
}

// TestBrowserOversightPage: a team lead opens the oversight page from the
// nav bar; its tables show the numbers of GET /v1/oversight, its charts are
// drawn (styled by the page's own stylesheet, under the inbox's CSP), and
// alice's fast approvals of high-risk requests are flagged. An approver
// sees no link, and the page refuses them.
func TestBrowserOversightPage(t *testing.T) {
	st := startClockStack(t)
	oversightHistory(t, st)
	var rep oversight.Report
	st.apiCall(t, "GET", "/v1/oversight", "lead", "", &rep)
	if rep.Total.Decisions != 14 || rep.Total.ExpiredUndecided != 2 {
		t.Fatalf("the history has %+v", rep.Total)
	}

	browser := newBrowser(t, testTimeout)
	lead := person(t, browser)
	do(t, lead, st.signIn("lead"), click(chromedp.ID("nav-oversight")), chromedp.WaitVisible(chromedp.ID("oversight-approvers")))
	if got := eval[string](t, lead, `location.pathname`); got != "/oversight" {
		t.Fatalf("the nav link led to %s", got)
	}
	var names []string
	var stats []oversight.Stats
	for _, a := range rep.Approvers {
		names, stats = append(names, a.Approver), append(stats, a.Stats)
	}
	checkRows(t, "approvers", eval[[]shownRow](t, lead, "("+readTable+")('oversight-approvers')"), names, stats)
	names, stats = nil, nil
	for _, r := range rep.Rules {
		names, stats = append(names, r.Rule), append(stats, r.Stats)
	}
	checkRows(t, "rules", eval[[]shownRow](t, lead, "("+readTable+")('oversight-rules')"), names, stats)
	if got := eval[string](t, lead, `document.querySelector("#oversight-total [data-k=decisions]").textContent`); got != "14" {
		t.Errorf("total decisions shown: %q", got)
	}

	// The charts: a box per approver who decided, a bar per approver, the
	// fast-decision bars of those who decided on high risk.
	for expr, want := range map[string]int{
		`document.querySelectorAll("#approvers-times g.box-row").length`:            3,
		`document.querySelectorAll("#approvers-decisions g.bar-row").length`:        3,
		`document.querySelectorAll("#approvers-fast g.bar-row").length`:             2,
		`document.querySelectorAll("#rules-times g.box-row").length`:                4,
		`document.querySelectorAll("#approvers-fast g.flagged").length`:             1,
		`document.querySelectorAll("svg line.threshold").length`:                    2,
		`document.querySelectorAll("[style]").length`:                               0,
		`document.querySelectorAll('#approvers-decisions rect.seg-expired').length`: 3,
	} {
		if got := eval[int](t, lead, expr); got != want {
			t.Errorf("%s = %d, want %d", expr, got, want)
		}
	}
	if got := eval[string](t, lead, `document.querySelector("#approvers-fast g.flagged").getAttribute("data-name")`); got != "alice" {
		t.Errorf("flagged for fast high-risk decisions: %s", got)
	}
	// The stylesheet, a file under /assets/, styles the SVG.
	if got := eval[string](t, lead, `getComputedStyle(document.querySelector("#approvers-times g.box-row:not(.flagged) rect.box")).fill`); got != "rgb(207, 224, 243)" {
		t.Errorf("a box's fill is %q: the oversight stylesheet did not apply", got)
	}
	// A shorter window, from the form, shows what the API shows for it.
	do(t, lead, chromedp.SetValue(chromedp.ID("fast"), "1m"), click(chromedp.CSS(`form.filters button`)))
	afterNavigation(t, lead, `location.search.includes("fast=1m") && document.readyState === "complete" && !!document.getElementById("oversight-approvers")`)
	st.apiCall(t, "GET", "/v1/oversight?fast=1m", "lead", "", &rep)
	if got := eval[string](t, lead, `document.querySelector("#oversight-total [data-k=fast_high_risk]").textContent`); got != fmt.Sprintf("%d of %d", rep.Total.FastHighRisk, rep.Total.HighRiskDecisions) {
		t.Errorf("fast decisions under 1m shown as %q, JSON %+v", got, rep.Total)
	}

	// An approver has no link and is refused.
	alice := person(t, browser)
	do(t, alice, st.signIn("alice"))
	if got := eval[int](t, alice, `document.querySelectorAll("#nav-oversight").length`); got != 0 {
		t.Error("an approver sees the oversight link")
	}
	do(t, alice, chromedp.Navigate(st.url+"/oversight"), chromedp.WaitVisible(chromedp.CSS(`[role=alert]`)))
	if got := eval[string](t, alice, `document.querySelector("[role=alert]").textContent`); !strings.Contains(got, "admins, viewers and auditors") {
		t.Errorf("an approver on /oversight reads %q", got)
	}
}

// afterNavigation waits for a condition on the page a navigation leads to:
// an evaluation that the navigation interrupts is tried again.
func afterNavigation(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", expr, err)
		}
		<-tick.C
	}
}

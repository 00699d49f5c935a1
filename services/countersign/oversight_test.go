package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// TestOversightCommand: `countersign oversight` prints the API's figures
// for a viewer, as tables or as the API's JSON, and is refused to an
// approver with the API's reason.
func TestOversightCommand(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	gate := countersigntest.Gate(t, apiJS, orchestrator.StaticPolicy{P: countersigntest.Policy(t, cliPolicy)})
	flags := map[string][]string{}
	var tokens []api.Token
	for _, u := range []struct{ subject, role string }{{"alice", api.RoleApprover}, {"lead", api.RoleViewer}} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		flags[u.subject] = []string{"--token", tok}
		tokens = append(tokens, api.Token{Name: u.subject, Subject: u.subject, SHA256: hash, Roles: []string{u.role}})
	}
	reg := prometheus.NewRegistry()
	s, err := api.New(context.Background(), api.Config{JS: apiJS, Gate: gate, Registerer: reg, Gatherer: reg, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	as := func(who string) *cliStack {
		return &cliStack{gate: gate, url: hs.URL, flags: append([]string{"--url", hs.URL}, flags[who]...)}
	}

	// alice approves one refund.
	alice := as("alice")
	id := alice.submit(t, orchestrator.ToolCall{ID: "r1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":5}`)})
	if out, err := alice.cli(t, "approvals", "approve", id); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}

	lead := as("lead")
	out, err := lead.cli(t, "oversight")
	if err != nil {
		t.Fatalf("oversight: %v\n%s", err, out)
	}
	for _, want := range []string{"1 requests, 1 decisions, approval rate 100%", "0 expired undecided", "APPROVER", "RULE", "refunds"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\nalice ") {
		t.Errorf("no row for alice:\n%s", out)
	}
	out, err = lead.cli(t, "oversight", "--json", "--since", "1h", "--fast", "1m")
	if err != nil {
		t.Fatalf("oversight --json: %v\n%s", err, out)
	}
	var rep oversight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Total.Decisions != 1 || rep.FastThresholdSeconds != 60 || rep.Until.Sub(rep.Since).Round(time.Minute) != time.Hour {
		t.Fatalf("the JSON: %+v", rep)
	}
	if out, err := lead.cli(t, "oversight", "--since", "lately"); err == nil || !strings.Contains(err.Error(), "invalid_parameter") {
		t.Fatalf("a bad --since: %v\n%s", err, out)
	}
	if out, err := alice.cli(t, "oversight"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("an approver: %v\n%s", err, out)
	}
}

// TestPrintOversight: the tables say what the report says, and mark fast
// high-risk decisions and expired requests.
func TestPrintOversight(t *testing.T) {
	rate := func(f float64) *float64 { return &f }
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rep := oversight.Report{Since: since, Until: since.Add(30 * 24 * time.Hour), FastThresholdSeconds: 10,
		Total: oversight.Stats{Requests: 9, Decisions: 7, Approved: 6, Rejected: 1, ApprovalRate: rate(6.0 / 7),
			TimeToDecide: &oversight.Spread{Median: 6, P90: 420}, HighRiskDecisions: 5, FastHighRisk: 4, ExpiredUndecided: 2,
			GrantsIssued: 1, GrantUses: 3},
		Approvers: []oversight.ApproverStats{
			{Approver: "alice", Stats: oversight.Stats{Requests: 9, Decisions: 5, Approved: 5, ApprovalRate: rate(1),
				TimeToDecide: &oversight.Spread{Median: 4, P90: 5.5}, HighRiskDecisions: 4, FastHighRisk: 4, ExpiredUndecided: 2,
				GrantsIssued: 1, GrantUses: 3}},
			{Approver: "bob", Stats: oversight.Stats{Requests: 3, Decisions: 2, Approved: 1, Rejected: 1, ApprovalRate: rate(0.5),
				TimeToDecide: &oversight.Spread{Median: 300, P90: 540}, HighRiskDecisions: 1}},
		},
		Rules: []oversight.RuleStats{{Rule: "mails", Stats: oversight.Stats{Requests: 2, ExpiredUndecided: 2}}},
	}
	var b bytes.Buffer
	printOversight(&b, &rep)
	want := `Requests made from 2026-03-01 00:00 UTC to 2026-03-31 00:00 UTC that you may read. Fast: under 10s.

9 requests, 7 decisions, approval rate 86%, time to decide median 6s and p90 7m00s,
4 of 5 ! fast on high and critical risk, 2 expired undecided, 1 grants issued (3 calls they allowed).

APPROVER  REQUESTS  DECISIONS  APPROVED  MEDIAN  P90    FAST (HIGH RISK)  EXPIRED UNDECIDED  GRANTS (USES)
alice     9         5          100%      4s      5.5s   4 of 4 !          2 !                1 (3)
bob       3         2          50%       5m00s   9m00s  0 of 1            0                  0 (0)

RULE   REQUESTS  DECISIONS  APPROVED  MEDIAN  P90  FAST (HIGH RISK)  EXPIRED UNDECIDED  GRANTS (USES)
mails  2         0          -         -       -    -                 2 !                0 (0)
`
	if got := b.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestPrintOversightChannelsAndExecution: the channels that decided, with
// their times to decision, and what became of the approved calls, with
// the calls never reported marked.
func TestPrintOversightChannelsAndExecution(t *testing.T) {
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rep := oversight.Report{Since: since, Until: since.Add(24 * time.Hour), FastThresholdSeconds: 10,
		Total:     oversight.Stats{Requests: 5},
		Approvers: []oversight.ApproverStats{},
		Rules:     []oversight.RuleStats{{Rule: "refunds", Stats: oversight.Stats{Requests: 5}}},
		Channels: []oversight.ChannelStats{
			{Channel: "push", Decided: 3, TimeToDecision: oversight.Spread{Min: 10, Median: 20, P90: 28, Max: 30}},
			{Channel: "timeout", Decided: 1, TimeToDecision: oversight.Spread{Min: 3600, Median: 3600, P90: 3600, Max: 3600}},
		},
		Execution: oversight.ExecutionStats{
			ExecutionCounts: oversight.ExecutionCounts{Approved: 3, Claimed: 3, Succeeded: 1, NotReported: 2},
			Rules: []oversight.RuleExecution{{Rule: "refunds",
				ExecutionCounts: oversight.ExecutionCounts{Approved: 3, Claimed: 3, Succeeded: 1, NotReported: 2}}},
		},
	}
	var b bytes.Buffer
	printOversight(&b, &rep)
	want := `
Time to decision by channel (from the request to its outcome, by the deciding vote's channel):
CHANNEL  DECIDED  MIN    MEDIAN  P90    MAX
push     3        10s    20s     28s    30s
timeout  1        1h00m  1h00m   1h00m  1h00m

3 approved, 3 claimed: 1 succeeded, 0 failed, 2 ! never reported.
RULE     APPROVED  CLAIMED  SUCCEEDED  FAILED  NOT REPORTED
refunds  3         3        1          0       2 !
`
	if got := b.String(); !strings.HasSuffix(got, want) {
		t.Fatalf("got:\n%s\nwant it to end with:\n%s", got, want)
	}
}

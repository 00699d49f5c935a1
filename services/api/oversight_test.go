package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const oversightPolicy = `
version: "oversight-1"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    risk: high
    approvers: [alice, bob]
  - name: mails
    tools: ["email.send"]
    action: require_approval
    risk: medium
    approvers: [alice]
    timeout: 1h
`

// oversightEnv is a whole stack whose every component reads one fake clock,
// so that times to decide are exact.
type oversightEnv struct {
	*env
	clock *countersigntest.Clock
	gate  *orchestrator.Gate
	reg   *prometheus.Registry
}

func setupOversight(t *testing.T) *oversightEnv {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	clock := countersigntest.NewClock(time.Now())
	clock.Attach(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Now: clock.Now})
	pol := countersigntest.Policy(t, oversightPolicy)
	countersigntest.Trust(t, pol)
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Policy: orchestrator.StaticPolicy{P: pol}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	e := &env{js: js, tokens: map[string]string{}, srv: srv}
	var tokens []api.Token
	add := func(name, subject string, tenants []string, roles ...string) {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok
		tokens = append(tokens, api.Token{Name: name, Subject: subject, SHA256: hash, Roles: roles, Tenants: tenants})
	}
	add("agent", "agent:billing", nil, api.RoleAgent)
	add("alice", "alice", nil, api.RoleApprover)
	add("bob", "bob", nil, api.RoleApprover)
	add("admin", "root", nil, api.RoleAdmin)
	add("viewer", "lead", nil, api.RoleViewer)
	add("auditor-acme", "audit:acme", []string{"acme"}, api.RoleAuditor)
	add("auditor", "audit:all", nil, api.RoleAuditor)
	reg := prometheus.NewRegistry()
	e.cfg = api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Tokens: tokens, Registerer: reg, Gatherer: reg, Now: clock.Now}
	s, err := api.New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return &oversightEnv{env: e, clock: clock, gate: gate, reg: reg}
}

// propose submits one call of a tenant's run and returns its event id.
func (o *oversightEnv) propose(t *testing.T, tenant, run, tool, args string) string {
	t.Helper()
	r := o.call(t, "POST", "/v1/reviews", "agent", fmt.Sprintf(
		`{"run":{"id":%q,"agent":"billing-bot","tenant":%q},"tool_calls":[{"id":"c1","name":%q,"arguments":%s}]}`, run, tenant, tool, args))
	var ans struct {
		Results []struct {
			EventID string `json:"event_id"`
		} `json:"results"`
	}
	r.decode(t, &ans)
	if r.status != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].EventID == "" {
		t.Fatalf("review: %d %s", r.status, r.body)
	}
	return ans.Results[0].EventID
}

func (o *oversightEnv) advance(t *testing.T, d time.Duration) {
	t.Helper()
	if err := o.clock.Advance(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func (o *oversightEnv) vote(t *testing.T, who, id, decision string) {
	t.Helper()
	body := fmt.Sprintf(`{"decision":%q}`, decision)
	if decision == contracts.DecisionReject {
		body = `{"decision":"reject","comment":"not this one"}`
	}
	if r := o.call(t, "POST", "/v1/approvals/"+id+"/votes", who, body); r.status != http.StatusOK {
		t.Fatalf("%s %s: %d %s", who, decision, r.status, r.body)
	}
}

func (o *oversightEnv) report(t *testing.T, who, query string) oversight.Report {
	t.Helper()
	r := o.call(t, "GET", "/v1/oversight"+query, who, nil)
	if r.status != http.StatusOK {
		t.Fatalf("oversight as %s: %d %s", who, r.status, r.body)
	}
	var rep oversight.Report
	r.decode(t, &rep)
	return rep
}

func approverRow(t *testing.T, rep oversight.Report, id string) oversight.Stats {
	t.Helper()
	for _, a := range rep.Approvers {
		if a.Approver == id {
			return a.Stats
		}
	}
	t.Fatalf("no row for %s in %+v", id, rep.Approvers)
	return oversight.Stats{}
}

func ruleRow(t *testing.T, rep oversight.Report, rule string) oversight.Stats {
	t.Helper()
	for _, r := range rep.Rules {
		if r.Rule == rule {
			return r.Stats
		}
	}
	t.Fatalf("no row for rule %s in %+v", rule, rep.Rules)
	return oversight.Stats{}
}

// oversightHistory makes three requests on the fake clock: alice approves a
// refund (acme) 4 s after it was made, bob rejects another (globex) after
// 2 min, and an email to send (acme) expires after an hour with nobody
// deciding it. It returns when the request was made.
func oversightHistory(t *testing.T, o *oversightEnv) time.Time {
	t.Helper()
	start := o.clock.Now()
	r1 := o.propose(t, "acme", "run-1", "billing.refund", `{"amount":20}`)
	r2 := o.propose(t, "globex", "run-2", "billing.refund", `{"amount":900}`)
	r3 := o.propose(t, "acme", "run-3", "email.send", `{"to":"jane@example.com"}`)
	o.advance(t, 4*time.Second)
	o.vote(t, "alice", r1, contracts.DecisionApprove)
	o.advance(t, 116*time.Second)
	o.vote(t, "bob", r2, contracts.DecisionReject)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.clock.WaitScheduled(ctx, r3, contracts.TimerExpire, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	o.advance(t, time.Hour)
	// Wait until the expiry is recorded.
	for {
		r := o.call(t, "GET", "/v1/approvals/"+r3+"?wait=10s", "admin", nil)
		var ans struct {
			Record contracts.Record `json:"record"`
		}
		r.decode(t, &ans)
		if ans.Record.Status == contracts.StatusExpired {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the email did not expire: %s", r.body)
		}
	}
	return start
}

// TestOversightFromRealDecisions: the figures of GET /v1/oversight come
// from the votes and expiries the arbiter recorded, scoped to what the
// caller may read, for admins, viewers and auditors only.
func TestOversightFromRealDecisions(t *testing.T) {
	o := setupOversight(t)
	start := oversightHistory(t, o)

	rep := o.report(t, "admin", "")
	if rep.Total.Requests != 3 || rep.Total.Decisions != 2 || rep.Total.Approved != 1 || rep.Total.Rejected != 1 ||
		rep.Total.ExpiredUndecided != 1 || rep.Total.HighRiskDecisions != 2 || rep.Total.FastHighRisk != 1 {
		t.Fatalf("total %+v", rep.Total)
	}
	if p := rep.Total.TimeToDecide; p == nil || p.Min != 4 || p.Median != 62 || p.Max != 120 {
		t.Fatalf("total time to decide %+v", p)
	}
	if !rep.Since.Equal(o.clock.Now().Add(-oversight.DefaultWindow)) || !rep.Until.Equal(o.clock.Now()) || rep.FastThresholdSeconds != 10 {
		t.Fatalf("window %s..%s fast %v", rep.Since, rep.Until, rep.FastThresholdSeconds)
	}
	alice := approverRow(t, rep, "alice")
	if alice.Requests != 3 || alice.Decisions != 1 || alice.FastHighRisk != 1 || alice.ExpiredUndecided != 1 ||
		alice.ApprovalRate == nil || *alice.ApprovalRate != 1 || alice.TimeToDecide.Median != 4 {
		t.Fatalf("alice %+v", alice)
	}
	bob := approverRow(t, rep, "bob")
	if bob.Requests != 2 || bob.Decisions != 1 || bob.Rejected != 1 || bob.FastHighRisk != 0 || bob.ExpiredUndecided != 0 ||
		*bob.ApprovalRate != 0 || bob.TimeToDecide.P90 != 120 {
		t.Fatalf("bob %+v", bob)
	}
	if refunds := ruleRow(t, rep, "refunds"); refunds.Requests != 2 || refunds.Decisions != 2 || *refunds.ApprovalRate != 0.5 {
		t.Fatalf("refunds %+v", refunds)
	}
	if mails := ruleRow(t, rep, "mails"); mails.Requests != 1 || mails.Decisions != 0 || mails.ExpiredUndecided != 1 || mails.TimeToDecide != nil || mails.ApprovalRate != nil {
		t.Fatalf("mails %+v", mails)
	}
	// Decided via the API after 4 s and 2 min; the email by its deadline,
	// found passed when the clock jumped to 1 h 2 min.
	if ch := rep.Channels; len(ch) != 2 || ch[0].Channel != "api" || ch[0].Decided != 2 || ch[0].TimeToDecision.Min != 4 ||
		ch[0].TimeToDecision.Max != 120 || ch[1].Channel != "timeout" || ch[1].Decided != 1 || ch[1].TimeToDecision.Median != 3720 {
		t.Fatalf("channels %+v", ch)
	}

	// A viewer sees the same; an auditor of acme only acme's requests.
	if v := o.report(t, "viewer", ""); v.Total.Requests != 3 || len(v.Approvers) != 2 {
		t.Fatalf("viewer %+v", v.Total)
	}
	acme := o.report(t, "auditor-acme", "")
	if acme.Total.Requests != 2 || acme.Total.Decisions != 1 || acme.Total.Rejected != 0 || approverRow(t, acme, "bob").Decisions != 0 {
		t.Fatalf("acme's auditor sees %+v", acme)
	}
	// An approver is not a reader of the oversight view.
	o.call(t, "GET", "/v1/oversight", "alice", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	o.call(t, "GET", "/v1/oversight", "", nil).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")

	// The window and the threshold.
	if late := o.report(t, "admin", "?since="+url.QueryEscape(start.Add(time.Second).Format(time.RFC3339))); late.Total.Requests != 0 || len(late.Approvers) != 0 {
		t.Fatalf("since after the requests: %+v", late)
	}
	if d := o.report(t, "admin", "?since=1d"); d.Total.Requests != 3 || !d.Since.Equal(o.clock.Now().Add(-24*time.Hour)) {
		t.Fatalf("since=1d: %+v", d)
	}
	if f := o.report(t, "admin", "?fast=3s"); f.Total.FastHighRisk != 0 || f.FastThresholdSeconds != 3 {
		t.Fatalf("fast=3s: %+v", f.Total)
	}
	if f := o.report(t, "admin", "?fast=5m"); f.Total.FastHighRisk != 2 {
		t.Fatalf("fast=5m: %+v", f.Total)
	}
	for q, field := range map[string]string{"?since=yesterday": "since", "?since=-3h": "since", "?fast=0s": "fast", "?fast=soon": "fast", "?fast=48h": "fast"} {
		o.call(t, "GET", "/v1/oversight"+q, "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, field)
	}
}

// TestOversightMetrics: the countersign_oversight_* figures are the same
// as the JSON's, by rule and risk, and name no approver.
func TestOversightMetrics(t *testing.T) {
	o := setupOversight(t)
	oversightHistory(t, o)

	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"countersign_oversight_requests", `rule="refunds",risk="high"`, 2},
		{"countersign_oversight_requests", `rule="mails",risk="medium"`, 1},
		{"countersign_oversight_decisions", `decision="approve",rule="refunds",risk="high"`, 1},
		{"countersign_oversight_decisions", `decision="reject",rule="refunds",risk="high"`, 1},
		{"countersign_oversight_fast_decisions", `rule="refunds",risk="high"`, 1},
		{"countersign_oversight_expired_undecided", `rule="mails",risk="medium"`, 1},
		{"countersign_oversight_expired_undecided", `rule="refunds",risk="high"`, 0},
		{"countersign_oversight_time_to_decide_median_seconds", `rule="refunds"`, 62},
		{"countersign_oversight_time_to_decide_p90_seconds", `rule="refunds"`, 108.4},
		{"countersign_oversight_time_to_decide_seconds_bucket", `le="5",rule="refunds",risk="high"`, 1},
		{"countersign_oversight_time_to_decide_seconds_bucket", `le="60",rule="refunds",risk="high"`, 1},
		{"countersign_oversight_time_to_decide_seconds_bucket", `le="300",rule="refunds",risk="high"`, 2},
		{"countersign_oversight_time_to_decide_seconds_count", `rule="refunds",risk="high"`, 2},
		{"countersign_oversight_time_to_decide_seconds_sum", `rule="refunds",risk="high"`, 124},
		{"countersign_oversight_time_to_decide_seconds_count", `rule="mails",risk="medium"`, 0},
		{"countersign_oversight_window_seconds", ``, oversight.DefaultWindow.Seconds()},
		{"countersign_oversight_fast_threshold_seconds", ``, 10},
	} {
		if got, ok := metricValue(t, o.reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s{%s} = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// No fast-decision series for a risk that is not high or critical.
	if _, ok := metricValue(t, o.reg, "countersign_oversight_fast_decisions", `rule="mails",risk="medium"`); ok {
		t.Error("a fast-decision series for medium risk")
	}
	// No approver is a label value.
	mfs, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "countersign_oversight_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); v == "alice" || v == "bob" {
					t.Errorf("%s has approver %s as a label value", mf.GetName(), v)
				}
			}
		}
	}
}

// metricValue reads one sample, named as the text format names it (a
// histogram's _bucket, _count and _sum included), with exactly labels
// (in the text format's syntax, in any order).
func metricValue(t *testing.T, reg *prometheus.Registry, name, labels string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(labels, ",")
	slices.Sort(want)
	labels = strings.Join(want, ",")
	key := func(ls []string) string {
		ls = slices.Clone(ls)
		slices.Sort(ls)
		return strings.Join(ls, ",")
	}
	family, part := name, ""
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if strings.HasSuffix(name, "_seconds"+suffix) {
			family, part = strings.TrimSuffix(name, suffix), suffix
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			switch part {
			case "":
				if key(ls) == labels {
					if g := m.GetGauge(); g != nil {
						return g.GetValue(), true
					}
				}
			case "_count", "_sum":
				if key(ls) == labels {
					if part == "_count" {
						return float64(m.GetHistogram().GetSampleCount()), true
					}
					return m.GetHistogram().GetSampleSum(), true
				}
			case "_bucket":
				for _, b := range m.GetHistogram().GetBucket() {
					all := append([]string{fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound()))}, ls...)
					if key(all) == labels {
						return float64(b.GetCumulativeCount()), true
					}
				}
			}
		}
	}
	return 0, false
}

// TestOversightAnswerMatchesOpenAPI: the answer of GET /v1/oversight, with
// rows that have decisions and rows that have none, is valid against its
// schema in openapi.json.
func TestOversightAnswerMatchesOpenAPI(t *testing.T) {
	o := setupOversight(t)
	oversightHistory(t, o)
	r := o.call(t, "GET", "/v1/oversight", "admin", nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(openAPIDocumentBytes(t))))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("https://countersign.test/openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("https://countersign.test/openapi.json#/components/schemas/OversightReport")
	if err != nil {
		t.Fatal(err)
	}
	answer, err := jsonschema.UnmarshalJSON(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(answer); err != nil {
		t.Fatalf("the answer does not match the OpenAPI schema: %v\n%s", err, r.body)
	}
	// The schema is not a blank cheque: a row without its figures fails.
	broken, _ := jsonschema.UnmarshalJSON(strings.NewReader(strings.Replace(string(r.body), `"decisions"`, `"decided"`, 1)))
	if sch.Validate(broken) == nil {
		t.Fatal("an answer without decisions passed the schema")
	}
}

func openAPIDocumentBytes(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

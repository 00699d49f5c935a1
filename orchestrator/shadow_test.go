package orchestrator_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

const shadowGatePolicy = `
version: "shadow-t1"
default: require_approval
rules:
  - name: gate-reads
    mode: shadow
    tools: ["read_*"]
    action: require_approval
    risk: high
    quorum: 2
    approvers: [ann, bob]
  - name: reads
    tools: ["read_*"]
    action: allow
  - name: deny-large
    mode: shadow
    tools: ["payments.*"]
    when: 'args.amount > 100'
    action: deny
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
  - name: no-shell
    tools: ["shell.*"]
    action: deny
`

// TestGateRecordsShadowVerdicts: the gate decides as the enforcing rules
// say, records what the shadow rules would have decided on the verdict
// and on the request, which the arbiter accepts as it would without them,
// and counts every shadow verdict and every flip.
func TestGateRecordsShadowVerdicts(t *testing.T) {
	e := setup(t)
	p := countersigntest.Policy(t, shadowGatePolicy)
	countersigntest.Gate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: p}) // the arbiter trusts p
	reg := prometheus.NewRegistry()
	g, err := orchestrator.NewGate(context.Background(), orchestrator.Config{
		JS: e.srv.JetStreamAs(embedded.RoleOrchestrator), Policy: orchestrator.StaticPolicy{P: p}, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	vs, err := g.Submit(context.Background(), run, []orchestrator.ToolCall{
		{ID: "s1", Name: "read_file", Arguments: json.RawMessage(`{"path":"a"}`)},
		{ID: "s2", Name: "payments.send", Arguments: json.RawMessage(`{"amount":500}`)},
		{ID: "s3", Name: "shell.exec", Arguments: json.RawMessage(`{}`)},
		{ID: "s4", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ verdict, shadow, action string }{
		{orchestrator.VerdictAllowed, "gate-reads", "require_approval"},
		{orchestrator.VerdictPending, "deny-large", "deny"},
		{orchestrator.VerdictDenied, "", ""},
		{orchestrator.VerdictPending, "", ""},
	}
	for i, w := range want {
		v := vs[i]
		if v.Verdict != w.verdict || w.shadow == "" && len(v.Shadow) != 0 ||
			w.shadow != "" && (len(v.Shadow) != 1 || v.Shadow[0].Rule != w.shadow || v.Shadow[0].Action != w.action) {
			t.Errorf("call %d: %s, shadow %+v; want %s, %s=%s", i, v.Verdict, v.Shadow, w.verdict, w.shadow, w.action)
		}
	}
	if s := vs[0].Shadow; len(s) == 1 && (s[0].Risk != "high" || s[0].Quorum != 2 || len(s[0].Approvers) != 2) {
		t.Errorf("gate-reads verdict %+v", s[0])
	}
	rec := e.waitRecord(t, vs[1].EventID, pending)
	if got := rec.Request.Shadow; len(got) != 1 || got[0].Rule != "deny-large" || got[0].Action != "deny" {
		t.Errorf("request shadow %+v", got)
	}
	if rec.Request.Policy.Rule != "payments" {
		t.Errorf("request decided by %q", rec.Request.Policy.Rule)
	}
	if rec := e.waitRecord(t, vs[3].EventID, pending); rec.Request.Shadow != nil {
		t.Errorf("a call no shadow rule matched records %+v", rec.Request.Shadow)
	}
	flips := map[[3]string]float64{
		{"gate-reads", "allow", "require_approval"}: 1,
		{"deny-large", "require_approval", "deny"}:  1,
	}
	if n := seriesCount(t, reg, "countersign_policy_shadow_flips_total"); n != len(flips) {
		t.Errorf("%d flip series, want %d", n, len(flips))
	}
	for l, want := range flips {
		vec := counterValue(t, reg, "countersign_policy_shadow_flips_total", map[string]string{"rule": l[0], "from": l[1], "to": l[2]})
		if vec != want {
			t.Errorf("flips %v = %v, want %v", l, vec, want)
		}
	}
	for _, rule := range []string{"gate-reads", "deny-large"} {
		if n := counterValue(t, reg, "countersign_policy_shadow_evaluations_total", map[string]string{"rule": rule}); n != 1 {
			t.Errorf("evaluations of %s = %v, want 1", rule, n)
		}
	}
}

// counterValue is the value of the counter name with labels in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// seriesCount is how many series the metric name has in reg.
func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

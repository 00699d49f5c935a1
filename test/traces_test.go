package test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	otlpcommon "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/countersign/countersign/contracts"
)

// tracePolicy holds payments for approval and tells a webhook of each.
const tracePolicy = `version: "traces-e2e-1"
default: allow
rules:
  - name: payments
    tools: ["payments_*"]
    action: require_approval
    risk: high
    channels: ["webhook:hook"]
    summary: "Pay {{args.amount}} {{args.currency}} to {{args.recipient}}"
`

// gotSpan is one span an OTLP receiver was sent.
type gotSpan struct {
	name, traceID, spanID, parentID string
	attrs                           map[string]string
}

// otlpReceiver is an OTLP/HTTP traces endpoint that keeps what it is sent.
type otlpReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []gotSpan
	headers []string // the x-tenant-key header of each export
	arrived chan struct{}
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	o := &otlpReceiver{arrived: make(chan struct{}, 1)}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(raw, &req) != nil {
			t.Errorf("OTLP export to %s (%s) does not decode", r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		o.add(&req, r.Header.Get("X-Tenant-Key"))
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *otlpReceiver) add(req *coltrace.ExportTraceServiceRequest, header string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.headers = append(o.headers, header)
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g := gotSpan{name: s.Name, traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parentID: hex.EncodeToString(s.ParentSpanId), attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					g.attrs[kv.Key] = anyString(kv.Value)
				}
				for _, kv := range rs.Resource.GetAttributes() {
					if kv.Key == "service.name" {
						g.attrs["service.name"] = kv.Value.GetStringValue()
					}
				}
				o.spans = append(o.spans, g)
			}
		}
	}
	select {
	case o.arrived <- struct{}{}:
	default:
	}
}

// anyString shows an attribute's value: a string as it is, an array as
// [a b], anything else as fmt prints it.
func anyString(v *otlpcommon.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *otlpcommon.AnyValue_StringValue:
		return x.StringValue
	case *otlpcommon.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *otlpcommon.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyString(e))
		}
		return fmt.Sprint(parts)
	}
	return fmt.Sprint(v.GetValue())
}

// trace waits until the spans of traceID include every name in want, and
// returns them all.
func (o *otlpReceiver) trace(t *testing.T, traceID string, want []string) []gotSpan {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		var got []gotSpan
		names := map[string]bool{}
		for _, s := range o.spans {
			if s.traceID == traceID {
				got, names[s.name] = append(got, s), true
			}
		}
		o.mu.Unlock()
		missing := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return names[n] })
		if len(missing) == 0 {
			return got
		}
		select {
		case <-o.arrived:
		case <-deadline.C:
			t.Fatalf("trace %s has no spans %v; it has %v", traceID, missing, names)
		}
	}
}

// startTracedServe runs serve with its otel section naming the receiver
// and a webhook that is told of each payment to approve.
func startTracedServe(t *testing.T, otlp *otlpReceiver) *serveProc {
	hook := newHookReceiver(t, 0)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`notify:
  webhooks:
    - name: hook
      url: %s/hooks/countersign
      secrets: [env:E2E_WEBHOOK_SECRET]
otel:
  endpoint: %s
  service_name: countersign-e2e
  headers: {x-tenant-key: env:E2E_OTEL_KEY}
`, hook.srv.URL, otlp.srv.URL)
	cfgFile, polFile := filepath.Join(dir, "countersign.yaml"), filepath.Join(dir, "policy.yaml")
	for path, data := range map[string]string{cfgFile: cfg, polFile: tracePolicy} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("E2E_WEBHOOK_SECRET", hook.secret)
	t.Setenv("E2E_OTEL_KEY", "otel-e2e-key")
	// Spans are exported in batches: a short delay only makes the test's
	// wait shorter.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	return startServe(t, t.TempDir(), "--config", cfgFile, "--policy", polFile)
}

// agentReview sends one payment for review in the agent's trace tp and
// returns the approval's id.
func agentReview(t *testing.T, p *serveProc, tp string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"run": map[string]any{"id": "run-traced", "agent": "billing-bot", "requested_by": "carol"},
		"tool_calls": []any{map[string]any{"id": "call-1", "name": "payments_send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}}}})
	req, _ := http.NewRequest("POST", p.url+"/v1/reviews", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set(contracts.HeaderTraceparent, tp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || len(ans.Results) != 1 || ans.Results[0]["verdict"] != "pending" {
		t.Fatalf("review: %d %v %v, want one pending call", resp.StatusCode, err, ans.Results)
	}
	return ans.Results[0]["event_id"].(string)
}

func TestOneConnectedTracePerApprovalFromTheAgentToTheOutcome(t *testing.T) {
	otlp := newOTLPReceiver(t)
	p := startTracedServe(t, otlp)
	ids := make([]byte, 24)
	_, _ = rand.Read(ids)
	traceID, agentSpan := hex.EncodeToString(ids[:16]), hex.EncodeToString(ids[16:])
	id := agentReview(t, p, "00-"+traceID+"-"+agentSpan+"-01")
	if code := p.call("POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if code := p.call("POST", "/v1/approvals/"+id+"/claim", map[string]any{"claim_id": "runner-1"}, nil); code != http.StatusOK {
		t.Fatalf("claim: %d", code)
	}
	if code := p.call("POST", "/v1/approvals/"+id+"/outcome", map[string]any{"status": contracts.ExecutionSucceeded}, nil); code != http.StatusOK {
		t.Fatalf("outcome: %d", code)
	}
	want := []string{"review", "approval.request", "notify", "vote", "decision", "claim", "outcome"}
	spans := otlp.trace(t, traceID, want)
	for _, s := range spans {
		t.Logf("span %s %s parent %s %v", s.name, s.spanID, s.parentID, s.attrs)
	}
	checkTraceConnected(t, spans, agentSpan)
	for _, s := range spans {
		if s.attrs["service.name"] != "countersign-e2e" {
			t.Errorf("span %s of service %q, want countersign-e2e", s.name, s.attrs["service.name"])
		}
		if s.name != "review" && s.attrs["countersign.event_id"] != id {
			t.Errorf("span %s names approval %q, want %s", s.name, s.attrs["countersign.event_id"], id)
		}
		for k, v := range s.attrs {
			if bytes.Contains([]byte(v), []byte("Globex")) {
				t.Errorf("span %s attribute %s shows an argument: %s", s.name, k, v)
			}
		}
	}
	// No span of the approval is outside the agent's trace.
	otlp.mu.Lock()
	defer otlp.mu.Unlock()
	for _, s := range otlp.spans {
		if s.attrs["countersign.event_id"] == id && s.traceID != traceID {
			t.Errorf("span %s of the approval is in trace %s, want the agent's %s", s.name, s.traceID, traceID)
		}
	}
	if len(otlp.headers) == 0 || otlp.headers[0] != "otel-e2e-key" {
		t.Errorf("exports carried x-tenant-key %q, want the configured header", otlp.headers)
	}
}

// checkTraceConnected checks that every span's parent is the agent's span
// or another span of the trace, and names each step's attributes.
func checkTraceConnected(t *testing.T, spans []gotSpan, agentSpan string) {
	t.Helper()
	known := map[string]string{agentSpan: "the agent's span"}
	for _, s := range spans {
		known[s.spanID] = s.name
	}
	for _, s := range spans {
		if _, ok := known[s.parentID]; !ok || s.parentID == s.spanID {
			t.Errorf("span %s has parent %q, which is neither the agent's span nor one of the trace", s.name, s.parentID)
		}
		switch s.name {
		case "review":
			if s.parentID != agentSpan || s.attrs["countersign.tool"] != "[payments_send]" {
				t.Errorf("review span: parent %s, attributes %v; want the agent's span and the tool", s.parentID, s.attrs)
			}
		case "notify":
			if s.attrs["countersign.channel"] != "webhook" {
				t.Errorf("notify span on channel %q, want webhook", s.attrs["countersign.channel"])
			}
		case "decision":
			if known[s.parentID] != "vote" || s.attrs["countersign.status"] != contracts.StatusApproved {
				t.Errorf("decision span: parent %q, status %q; want the vote's child, approved", known[s.parentID], s.attrs["countersign.status"])
			}
		case "outcome":
			if s.attrs["countersign.outcome"] != contracts.ExecutionSucceeded {
				t.Errorf("outcome span reports %q, want %s", s.attrs["countersign.outcome"], contracts.ExecutionSucceeded)
			}
		}
	}
}

package test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

const expiringPolicy = `version: "expiry-e2e"
default: require_approval
rules:
  - name: quick
    tools: ["deploy"]
    action: require_approval
    timeout: 6s
`

// TestExpirySurvivesKill9 creates a request with a short deadline, kills
// serve (and with it the embedded NATS server) before the deadline, starts it
// again, and sees the request expire once, with the waiting run resuming
// with the expired verdict.
func TestExpirySurvivesKill9(t *testing.T) {
	data := t.TempDir()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(expiringPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, data, "--policy", file)
	body := map[string]any{
		"run":        map[string]any{"id": "run-expiry", "agent": "ops"},
		"tool_calls": []map[string]any{{"id": "d1", "name": "deploy", "arguments": map[string]any{"env": "prod"}}},
	}
	var first reviewAnswer
	if code := p.call("POST", "/v1/reviews", body, &first); code != 200 || first.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, first.Results)
	}
	id := first.Results[0].EventID
	var rec struct {
		Record struct {
			Status    string    `json:"status"`
			ExpiresAt time.Time `json:"expires_at"`
		} `json:"record"`
	}
	if code := p.call("GET", "/v1/approvals/"+id, nil, &rec); code != 200 || rec.Record.Status != "pending" {
		t.Fatalf("record: %d %+v", code, rec)
	}
	deadline := rec.Record.ExpiresAt
	p.kill()
	if time.Now().After(deadline) {
		t.Fatalf("the deadline %s passed before the kill; the test cannot show survival", deadline)
	}

	p2 := startServe(t, data, "--policy", file)
	// The re-run of the agent re-attaches and waits for the outcome. When
	// the kill came between the record's write and its expiry schedule's,
	// the schedule is written once the request is delivered again, after
	// the arbiter's ack wait (30 s): a wait of 30 s can end just before it,
	// so the run re-attaches as an agent would, for up to two minutes.
	var again reviewAnswer
	for give := time.Now().Add(2 * time.Minute); ; {
		if code := p2.call("POST", "/v1/reviews?wait=30s", body, &again); code != 200 {
			t.Fatalf("re-review: %d", code)
		}
		if again.Results[0].Verdict != "pending" || time.Now().After(give) {
			break
		}
	}
	if r := again.Results[0]; r.Verdict != "expired" || r.EventID != id || r.Reason == "" {
		t.Fatalf("re-review: %+v, want expired with a message for the model", r)
	}
	var done struct {
		Record struct {
			Status  string `json:"status"`
			Outcome struct {
				DecidedBy []string  `json:"decided_by"`
				DecidedAt time.Time `json:"decided_at"`
			} `json:"outcome"`
		} `json:"record"`
	}
	p2.call("GET", "/v1/approvals/"+id, nil, &done)
	if done.Record.Status != "expired" || len(done.Record.Outcome.DecidedBy) != 1 || done.Record.Outcome.DecidedBy[0] != "timeout" {
		t.Fatalf("record after expiry: %+v", done.Record)
	}
	if done.Record.Outcome.DecidedAt.Before(deadline) {
		t.Fatalf("expired at %s, before its deadline %s", done.Record.Outcome.DecidedAt, deadline)
	}
	// Exactly one decided event in the timeline.
	var timeline struct {
		Events []struct {
			Kind string `json:"kind"`
		} `json:"events"`
	}
	// The decided event is announced after the record's write the re-review
	// saw: read the timeline until it is there.
	decided := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for give := time.After(30 * time.Second); decided == 0; {
		p2.call("GET", "/v1/approvals/"+id+"/events", nil, &timeline)
		for _, e := range timeline.Events {
			if e.Kind == "decided" {
				decided++
			}
		}
		if decided > 0 {
			break
		}
		select {
		case <-tick.C:
		case <-give:
			t.Fatalf("no decided event in the timeline within 30 s: %+v", timeline.Events)
		}
	}
	if decided != 1 {
		t.Fatalf("%d decided events in the timeline, want 1: %+v", decided, timeline.Events)
	}
}

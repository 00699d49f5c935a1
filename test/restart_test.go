package test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

type reviewAnswer struct {
	Results []struct {
		ToolCallID string `json:"tool_call_id"`
		Verdict    string `json:"verdict"`
		EventID    string `json:"event_id"`
		Reason     string `json:"reason"`
		Rule       string `json:"rule"`
	} `json:"results"`
}

type listAnswer struct {
	Items []struct {
		Record struct {
			Status  string `json:"status"`
			Request struct {
				EventID string `json:"event_id"`
			} `json:"request"`
		} `json:"record"`
	} `json:"items"`
}

func reviewBody(runID string) map[string]any {
	return map[string]any{
		"run": map[string]any{"id": runID, "agent": "billing-bot", "requested_by": "someone-else"},
		"tool_calls": []map[string]any{
			{"id": "pay", "name": "payments.send", "arguments": map[string]any{"amount": 10, "currency": "EUR", "recipient": "A"}},
			{"id": "mail", "name": "email.send", "arguments": map[string]any{"to": "x@example.com", "subject": "hi"}},
			{"id": "drop", "name": "db.drop_table", "arguments": map[string]any{"database": "prod", "table": "users"}},
			{"id": "look", "name": "search_docs", "arguments": map[string]any{"q": "vat"}},
		},
	}
}

func TestServeSurvivesKill9(t *testing.T) {
	data := t.TempDir()
	p := startServe(t, data)
	var first reviewAnswer
	if code := p.call("POST", "/v1/reviews", reviewBody("run-k9"), &first); code != 200 {
		t.Fatalf("review: %d", code)
	}
	ids := map[string]string{}
	for _, r := range first.Results {
		ids[r.ToolCallID] = r.EventID
	}
	if first.Results[3].Verdict != "allowed" || first.Results[0].Verdict != "pending" {
		t.Fatalf("first review: %+v", first.Results)
	}
	// Kill at once: the requests are stored, the records may not exist yet.
	p.kill()

	p2 := startServe(t, data)
	for _, id := range []string{ids["pay"], ids["mail"], ids["drop"]} {
		p2.waitExists(id)
	}
	var list listAnswer
	if code := p2.call("GET", "/v1/approvals?status=pending&limit=100", nil, &list); code != 200 {
		t.Fatalf("list: %d", code)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d pending approvals after restart, want 3", len(list.Items))
	}
	// Decide after the restart, with the CLI.
	if out, err := p2.cli("approvals", "approve", ids["pay"]); err != nil || !strings.Contains(out, "approved") {
		t.Fatalf("approve: %v %s", err, out)
	}
	if out, err := p2.cli("approvals", "reject", ids["mail"], "--reason", "not to the CEO"); err != nil || !strings.Contains(out, "rejected") {
		t.Fatalf("reject: %v %s", err, out)
	}
	// Kill again with one approval still pending, restart, re-run the review.
	p2.kill()
	p3 := startServe(t, data)
	var again reviewAnswer
	if code := p3.call("POST", "/v1/reviews", reviewBody("run-k9"), &again); code != 200 {
		t.Fatalf("review again: %d", code)
	}
	got := []string{}
	for _, r := range again.Results {
		got = append(got, r.ToolCallID+"="+r.Verdict)
		if r.EventID != ids[r.ToolCallID] {
			t.Fatalf("%s: event id %s after restart, want %s", r.ToolCallID, r.EventID, ids[r.ToolCallID])
		}
	}
	if want := "pay=allowed mail=denied drop=pending look=allowed"; strings.Join(got, " ") != want {
		t.Fatalf("verdicts after restarts: %s, want %s", strings.Join(got, " "), want)
	}
	if !strings.Contains(again.Results[1].Reason, "not to the CEO") {
		t.Fatalf("rejection reason lost: %q", again.Results[1].Reason)
	}
	var all listAnswer
	p3.call("GET", "/v1/approvals?limit=100", nil, &all)
	if len(all.Items) != 3 {
		t.Fatalf("%d approvals in total, want 3 (nothing duplicated)", len(all.Items))
	}
	statuses := map[string]int{}
	for _, it := range all.Items {
		statuses[it.Record.Status]++
	}
	if fmt.Sprint(statuses) != "map[approved:1 pending:1 rejected:1]" {
		t.Fatalf("statuses %v", statuses)
	}
}

// waitExists polls until the arbiter has created the record of id.
func (p *serveProc) waitExists(id string) {
	p.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if p.call("GET", "/v1/approvals/"+id, nil, nil) == 200 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("record %s was never created", id)
		}
	}
}

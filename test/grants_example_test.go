package test

import (
	"net/http"
	"strings"
	"testing"
)

// TestGrantExampleRunsUnderTheShippedPolicy: docs/using.md's
// `approvals approve <event_id> --grant run --ttl 1h` works as written on a
// server started as make run starts it (deploy/policy.yaml): the approval
// grants, and the run's next payment is allowed by the grant, without a
// new request.
func TestGrantExampleRunsUnderTheShippedPolicy(t *testing.T) {
	p := startServe(t, t.TempDir())
	review := func(callID string) map[string]any {
		var ans struct {
			Results []map[string]any `json:"results"`
		}
		body := map[string]any{
			"run": map[string]any{"id": "run-grant", "agent": "billing-bot", "requested_by": "carol"},
			"tool_calls": []map[string]any{{"id": callID, "name": "payments_send",
				"arguments": map[string]any{"amount": 40, "currency": "EUR", "recipient": "Cafe Central"}}},
		}
		if code := p.call("POST", "/v1/reviews", body, &ans); code != http.StatusOK || len(ans.Results) != 1 {
			t.Fatalf("review: %d %v", code, ans.Results)
		}
		return ans.Results[0]
	}
	first := review("call-1")
	if first["verdict"] != "pending" || first["rule"] != "payments" {
		t.Fatalf("first payment: %v, want pending under the payments rule", first)
	}
	id, _ := first["event_id"].(string)
	out, err := p.cli("approvals", "approve", id, "--grant", "run", "--ttl", "1h")
	if err != nil || !strings.Contains(out, "Vote counted") {
		t.Fatalf("approvals approve --grant run --ttl 1h: %v\n%s", err, out)
	}
	second := review("call-2")
	if second["verdict"] != "allowed" || second["grant_id"] != id {
		t.Fatalf("the run's next payment: %v, want allowed by grant %s", second, id)
	}
}

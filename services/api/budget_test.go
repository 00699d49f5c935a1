package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// argsOf is a JSON object whose canonical form is exactly n bytes.
func argsOf(n int) json.RawMessage {
	fill := n - len(`{"blob":""}`)
	return json.RawMessage(`{"blob":"` + strings.Repeat("<&>x", fill/4+1)[:fill] + `"}`)
}

// TestReviewSizeBudget: a review whose arguments are at the limit the
// server's max payload allows is accepted and can be approved; one byte
// more is refused with 413 too_large before anything is published. Votes
// over their limits are refused the same way.
func TestReviewSizeBudget(t *testing.T) {
	e := setup(t)
	lim := contracts.LimitsFor(contracts.DefaultMaxPayload)
	run := contracts.Run{ID: "run-big", Agent: "billing-bot"}

	r := e.call(t, "POST", "/v1/reviews", "agent", reviewBody(run, toolCall{ID: "over", Name: "deploy", Arguments: argsOf(lim.Arguments + 1)}))
	r.wantError(t, http.StatusRequestEntityTooLarge, "too_large", "tool_calls[0].arguments")
	if got := e.call(t, "GET", "/v1/approvals/"+orchestrator.EventID(run, "over"), "alice", nil); got.status != http.StatusNotFound {
		t.Fatalf("the refused review left an approval behind: %d %s", got.status, got.body)
	}

	res := e.review(t, "", run, toolCall{ID: "max", Name: "deploy", Arguments: argsOf(lim.Arguments)})
	if res[0].Verdict != orchestrator.VerdictPending {
		t.Fatalf("review at the limit: %+v", res[0])
	}
	id := res[0].EventID
	e.vote(t, "bob", id, map[string]any{"decision": "reject", "comment": strings.Repeat("c", contracts.MaxCommentBytes+1)}).
		wantError(t, http.StatusRequestEntityTooLarge, "too_large", "comment")
	e.vote(t, "bob", id, map[string]any{"decision": "edit", "arguments": argsOf(lim.Arguments + 1)}).
		wantError(t, http.StatusRequestEntityTooLarge, "too_large", "arguments")
	r = e.vote(t, "bob", id, map[string]any{"decision": "approve", "comment": strings.Repeat("c", contracts.MaxCommentBytes)})
	if r.status != http.StatusOK {
		t.Fatalf("approve with the largest comment: %d %s", r.status, r.body)
	}
	var ans recordAnswer
	r.decode(t, &ans)
	if ans.Record.Status != contracts.StatusApproved {
		t.Fatalf("status %s, want approved", ans.Record.Status)
	}
}

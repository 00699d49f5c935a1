package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator"
)

const decisionsPolicy = `version: "decisions-1"
default: require_approval
rules:
  - name: no-questions-from-interns
    tools: ["request_human_input"]
    agents: ["intern-*"]
    action: deny
    reason: "Interns ask their mentor in person."
  - name: questions
    tools: ["request_human_input"]
    action: require_approval
    approvers: [alice, bob]
  - name: refunds
    tools: ["stripe.refund"]
    action: require_approval
    quorum: 2
    approvers: [alice, bob, approver-0]
    allowed_decisions: [approve, reject, edit, respond]
`

const refundSchema = `{
  "type": "object",
  "required": ["amount", "currency"],
  "properties": {
    "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
    "currency": {"enum": ["eur", "usd"]},
    "reason": {"type": "string"}
  },
  "additionalProperties": false
}`

// withDecisionsPolicy applies decisionsPolicy as the live policy.
func (e *env) withDecisionsPolicy(t *testing.T) {
	t.Helper()
	if r := e.call(t, "POST", "/v1/policy", "admin", decisionsPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
}

type reviewCall struct {
	ID         string          `json:"id,omitempty"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	ToolSchema json.RawMessage `json:"tool_schema,omitempty"`
}

func (e *env) reviewOne(t *testing.T, query string, run contracts.Run, c reviewCall) result {
	t.Helper()
	r := e.call(t, "POST", "/v1/reviews"+query, "agent", map[string]any{"run": run, "tool_calls": []reviewCall{c}})
	if r.status != http.StatusOK {
		t.Fatalf("review: %d %s", r.status, r.body)
	}
	var ans struct {
		Results []result `json:"results"`
	}
	r.decode(t, &ans)
	return ans.Results[0]
}

func (e *env) record(t *testing.T, id string) contracts.Record {
	t.Helper()
	var ans recordAnswer
	r := e.call(t, "GET", "/v1/approvals/"+id, "alice", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	r.decode(t, &ans)
	return ans.Record
}

func (e *env) wantCounted(t *testing.T, token, id string, body any) contracts.Record {
	t.Helper()
	r := e.vote(t, token, id, body)
	if r.status != http.StatusOK {
		t.Fatalf("vote by %s: %d %s", token, r.status, r.body)
	}
	var ans recordAnswer
	r.decode(t, &ans)
	return ans.Record
}

func TestReviewToolSchemaValidation(t *testing.T) {
	e := setup(t)
	run := map[string]any{"agent": "billing-bot"}
	for _, tc := range []struct {
		name   string
		schema any
	}{
		{"unknown type", map[string]any{"type": "nope"}},
		{"remote $ref", map[string]any{"$ref": "https://example.com/refund.json"}},
		{"file $ref", map[string]any{"properties": map[string]any{"a": map[string]any{"$ref": "file:///etc/passwd"}}}},
		{"not an object", []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"run": run, "tool_calls": []any{
				map[string]any{"name": "a"},
				map[string]any{"name": "stripe.refund", "arguments": map[string]any{}, "tool_schema": tc.schema},
			}}
			e.call(t, "POST", "/v1/reviews", "agent", body).wantError(t, http.StatusBadRequest, "invalid_schema", "tool_calls[1].tool_schema")
		})
	}
}

func TestEditValidatedAgainstToolSchema(t *testing.T) {
	e := setup(t)
	e.withDecisionsPolicy(t)
	run := contracts.Run{ID: "run-edit", Agent: "billing-bot"}
	call := reviewCall{
		ID: "refund-1", Name: "stripe.refund",
		Arguments:  json.RawMessage(`{"amount":100,"currency":"eur","reason":"duplicate"}`),
		ToolSchema: json.RawMessage(refundSchema),
	}
	res := e.reviewOne(t, "", run, call)
	if res.Verdict != orchestrator.VerdictPending {
		t.Fatalf("review: %+v", res)
	}
	id := res.EventID
	if rec := e.record(t, id); len(rec.Request.ToolSchema) == 0 {
		t.Fatal("the request does not carry tool_schema")
	}

	// alice approves the requested arguments: 1 of 2.
	e.wantCounted(t, "alice", id, map[string]any{"decision": "approve"})

	// An edit that fails the schema is answered at once, with the pointer
	// of the failing value; nothing is published.
	r := e.vote(t, "bob", id, map[string]any{"decision": "edit", "arguments": map[string]any{"amount": 5000, "currency": "eur"}})
	r.wantError(t, http.StatusBadRequest, "invalid_arguments", "arguments/amount")
	if !strings.Contains(string(r.body), "1000") {
		t.Errorf("the message does not say the limit: %s", r.body)
	}
	e.vote(t, "bob", id, map[string]any{"decision": "edit", "arguments": map[string]any{"amount": 5}}).
		wantError(t, http.StatusBadRequest, "invalid_arguments", "arguments/currency")
	e.vote(t, "bob", id, map[string]any{"decision": "edit"}).wantError(t, http.StatusBadRequest, "invalid_arguments", "arguments")

	// The same edit straight on the bus is refused by the arbiter, which
	// records the schema error's path.
	voteID := uuid.NewString()
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: voteID, EventID: id, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "bob", Via: contracts.ViaNATS}, Arguments: json.RawMessage(`{"amount":5000,"currency":"eur"}`),
		DecidedAt: time.Now().UTC(),
	}
	if _, err := events.Publish(context.Background(), e.js, contracts.ResolvedSubject(id), v, voteID, nil); err != nil {
		t.Fatal(err)
	}
	refused := e.waitRefusedVote(t, id, voteID)
	if refused.Reason != contracts.ReasonInvalidArguments || !strings.HasPrefix(refused.Detail, "arguments/amount: ") {
		t.Fatalf("refused vote %+v", refused)
	}

	// bob's valid edit is his approval of new arguments; alice approved
	// others, so hers stops counting and the record stays pending.
	edited := `{"amount":80,"currency":"eur"}`
	rec := e.wantCounted(t, "bob", id, map[string]any{"decision": "edit", "arguments": json.RawMessage(edited), "comment": "refund the partial amount"})
	if rec.Status != contracts.StatusPending {
		t.Fatalf("status %s after an edit with one approval of other arguments; want pending", rec.Status)
	}
	// An approval of what alice saw before the edit is stale.
	requestedSHA := rec.Request.ToolCall.ArgumentsSHA256
	e.vote(t, "approver-0", id, map[string]any{"decision": "approve", "arguments_sha256": requestedSHA}).
		wantError(t, http.StatusConflict, "stale_arguments", "")
	// A refused vote does not use up approver-0's vote.
	rec = e.wantCounted(t, "approver-0", id, map[string]any{"decision": "approve"})
	if rec.Status != contracts.StatusApproved {
		t.Fatalf("status %s, want approved", rec.Status)
	}
	out := rec.Outcome
	if len(out.DecidedBy) != 2 || out.DecidedBy[0] != "bob" || out.DecidedBy[1] != "approver-0" {
		t.Errorf("decided by %v, want bob and approver-0", out.DecidedBy)
	}
	wantSameJSON(t, "final arguments", out.Arguments, edited)
	wantSameJSON(t, "original arguments", rec.Request.ToolCall.Arguments, `{"amount":100,"currency":"eur","reason":"duplicate"}`)
	wantSameJSON(t, "diff", out.Diff, `[{"op":"replace","path":"/amount","value":80},{"op":"remove","path":"/reason"}]`)

	// The agent's re-review gets the edited arguments to run with.
	again := e.reviewOne(t, "", run, call)
	if again.Verdict != orchestrator.VerdictAllowed {
		t.Fatalf("re-review: %+v", again)
	}
	wantSameJSON(t, "allowed arguments", again.Arguments, edited)
	// ... and is told a human changed them, and how.
	if !again.Edited {
		t.Errorf("re-review of an edited approval: edited false")
	}
	wantSameJSON(t, "review diff", again.Diff, `[{"op":"replace","path":"/amount","value":80},{"op":"remove","path":"/reason"}]`)
}

func (e *env) waitRefusedVote(t *testing.T, id, voteID string) contracts.RefusedVote {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ans recordAnswer
		r := e.call(t, "GET", "/v1/approvals/"+id+"?wait=1s", "alice", nil)
		r.decode(t, &ans)
		for _, rv := range ans.Record.RefusedVotes {
			if rv.VoteID == voteID {
				return rv
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vote %s was never refused: %s", voteID, r.body)
		}
	}
}

func TestVoteBodiesPerDecision(t *testing.T) {
	e := setup(t)
	e.withDecisionsPolicy(t)
	res := e.reviewOne(t, "", contracts.Run{ID: "run-b", Agent: "billing-bot"},
		reviewCall{ID: "c1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":1,"currency":"eur"}`)})
	id := res.EventID
	for _, tc := range []struct {
		name        string
		body        map[string]any
		code, field string
	}{
		{"edit with array arguments", map[string]any{"decision": "edit", "arguments": []int{1}}, "invalid_arguments", "arguments"},
		{"approve with arguments", map[string]any{"decision": "approve", "arguments": map[string]any{"a": 1}}, "invalid_field", "arguments"},
		{"respond without text", map[string]any{"decision": "respond"}, "invalid_field", "comment"},
		{"answer without answer", map[string]any{"decision": "answer"}, "invalid_field", "answer"},
		{"answer with unknown action", map[string]any{"decision": "answer", "answer": map[string]any{"action": "maybe"}}, "invalid_field", "answer.action"},
		{"decline with content", map[string]any{"decision": "answer", "answer": map[string]any{"action": "decline", "content": map[string]any{"a": 1}}}, "invalid_field", "answer.content"},
		{"answer on another decision", map[string]any{"decision": "approve", "answer": map[string]any{"action": "accept"}}, "invalid_field", "answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.vote(t, "alice", id, tc.body).wantError(t, http.StatusBadRequest, tc.code, tc.field)
		})
	}
	// An answer on a tool approval goes to the arbiter, which refuses it.
	e.vote(t, "alice", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "content": map[string]any{}}}).
		wantError(t, http.StatusForbidden, "decision_not_allowed", "")
}

func TestRespondReturnsTextToTheAgent(t *testing.T) {
	e := setup(t)
	e.withDecisionsPolicy(t)
	run := contracts.Run{ID: "run-r", Agent: "billing-bot"}
	call := reviewCall{ID: "c1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":100,"currency":"eur"}`)}
	id := e.reviewOne(t, "", run, call).EventID
	rec := e.wantCounted(t, "bob", id, map[string]any{"decision": "respond", "comment": "Offer a voucher instead of a refund."})
	if rec.Status != contracts.StatusResponded || rec.Outcome.Comment != "Offer a voucher instead of a refund." {
		t.Fatalf("record %s %+v", rec.Status, rec.Outcome)
	}
	res := e.reviewOne(t, "?wait=5s", run, call)
	if res.Verdict != orchestrator.VerdictResponded || res.Reason != "Offer a voucher instead of a refund." || len(res.Arguments) != 0 {
		t.Fatalf("verdict %+v, want responded with the text as the tool result", res)
	}
}

type questionAnswer struct {
	EventID string `json:"event_id"`
	Status  string `json:"status"`
	Answer  *struct {
		Action     string          `json:"action"`
		Content    json.RawMessage `json:"content"`
		AnsweredBy string          `json:"answered_by"`
	} `json:"answer"`
	Reason string `json:"reason"`
	Rule   string `json:"rule"`
}

func (e *env) ask(t *testing.T, query string, body any) questionAnswer {
	t.Helper()
	r := e.call(t, "POST", "/v1/questions"+query, "agent", body)
	if r.status != http.StatusOK {
		t.Fatalf("question: %d %s", r.status, r.body)
	}
	var ans questionAnswer
	r.decode(t, &ans)
	return ans
}

func TestQuestions(t *testing.T) {
	e := setup(t)
	e.withDecisionsPolicy(t)
	run := map[string]any{"id": "run-q", "agent": "travel-bot"}
	schema := map[string]any{
		"type": "object", "required": []string{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string", "minLength": 2}, "nights": map[string]any{"type": "integer", "minimum": 1}},
	}
	body := map[string]any{"run": run, "id": "call-ask-1", "question": map[string]any{"text": "Which city should I book?", "schema": schema}}

	// Validation and roles.
	e.call(t, "POST", "/v1/questions", "alice", body).wantError(t, http.StatusForbidden, "forbidden", "")
	e.call(t, "POST", "/v1/questions", "agent", map[string]any{"run": run, "question": map[string]any{"text": ""}}).
		wantError(t, http.StatusBadRequest, "invalid_field", "question.text")
	e.call(t, "POST", "/v1/questions", "agent", map[string]any{"run": run, "question": map[string]any{"text": "?", "schema": map[string]any{"$ref": "http://127.0.0.1:1/x"}}}).
		wantError(t, http.StatusBadRequest, "invalid_schema", "question.schema")
	e.call(t, "POST", "/v1/questions", "agent", map[string]any{"run": run, "question": map[string]any{"text": "?", "extra": 1}}).
		wantError(t, http.StatusBadRequest, "unknown_field", "question.extra")

	ans := e.ask(t, "", body)
	if ans.Status != orchestrator.VerdictPending || ans.EventID == "" || ans.Rule != "questions" {
		t.Fatalf("question: %+v", ans)
	}
	id := ans.EventID
	rec := e.record(t, id)
	if rec.Request.Kind != contracts.KindHumanInput || rec.Request.Question == nil || rec.Request.Question.Text != "Which city should I book?" {
		t.Fatalf("request %+v", rec.Request)
	}
	// Only answers count on a question.
	e.vote(t, "alice", id, map[string]any{"decision": "approve"}).wantError(t, http.StatusForbidden, "decision_not_allowed", "")
	// An answer that fails the schema is refused with its pointer.
	e.vote(t, "alice", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "content": map[string]any{"city": "X"}}}).
		wantError(t, http.StatusBadRequest, "invalid_arguments", "answer/content/city")
	e.vote(t, "alice", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept"}}).
		wantError(t, http.StatusBadRequest, "invalid_arguments", "answer/content")
	rec = e.wantCounted(t, "bob", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "content": map[string]any{"city": "Lisbon", "nights": 3}}})
	if rec.Status != contracts.StatusAnswered || rec.Outcome.Action != "accept" {
		t.Fatalf("record %s %+v", rec.Status, rec.Outcome)
	}
	// Asking again re-attaches and returns the answer.
	ans = e.ask(t, "?wait=5s", body)
	if ans.Status != orchestrator.VerdictAnswered || ans.EventID != id || ans.Answer == nil || ans.Answer.Action != "accept" || ans.Answer.AnsweredBy != "bob" {
		t.Fatalf("answer %+v", ans)
	}
	wantSameJSON(t, "content", ans.Answer.Content, `{"city":"Lisbon","nights":3}`)
	// The same id for another question conflicts.
	other := map[string]any{"run": run, "id": "call-ask-1", "question": map[string]any{"text": "Something else?"}}
	e.call(t, "POST", "/v1/questions", "agent", other).wantError(t, http.StatusConflict, "arguments_changed", "id")
}

func TestQuestionDeclineCancelDenied(t *testing.T) {
	e := setup(t)
	e.withDecisionsPolicy(t)
	run := map[string]any{"id": "run-d", "agent": "travel-bot"}
	for _, action := range []string{"decline", "cancel"} {
		body := map[string]any{"run": run, "id": "q-" + action, "question": map[string]any{"text": "Upgrade to business class?"}}
		ans := e.ask(t, "", body)
		rec := e.record(t, ans.EventID)
		wantSameJSON(t, "default schema", rec.Request.Question.Schema, string(orchestrator.DefaultAnswerSchema))
		// A long poll returns the answer, whether it lands before or during the poll.
		done := make(chan questionAnswer, 1)
		go func() { done <- e.ask(t, "?wait=30s", body) }()
		e.wantCounted(t, "alice", ans.EventID, map[string]any{"decision": "answer", "answer": map[string]any{"action": action}})
		got := <-done
		if got.Status != orchestrator.VerdictAnswered || got.Answer == nil || got.Answer.Action != action || len(got.Answer.Content) != 0 {
			t.Fatalf("%s: %+v", action, got)
		}
	}
	// Free text answers fit the default schema.
	body := map[string]any{"run": run, "id": "q-text", "question": map[string]any{"text": "Any dietary needs?"}}
	id := e.ask(t, "", body).EventID
	e.vote(t, "bob", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "content": map[string]any{"note": "x"}}}).
		wantError(t, http.StatusBadRequest, "invalid_arguments", "answer/content/text")
	e.wantCounted(t, "bob", id, map[string]any{"decision": "answer", "answer": map[string]any{"action": "accept", "content": map[string]any{"text": "Vegetarian."}}})

	denied := e.ask(t, "", map[string]any{"run": map[string]any{"id": "r", "agent": "intern-7"}, "id": "q", "question": map[string]any{"text": "Deploy?"}})
	if denied.Status != orchestrator.VerdictDenied || denied.Reason != "Interns ask their mentor in person." || denied.EventID != "" {
		t.Fatalf("denied: %+v", denied)
	}
}

func TestRequestHumanInputToolDefinition(t *testing.T) {
	e := setup(t)
	r := e.call(t, "GET", "/v1/tools/request_human_input", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	var def struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"input_schema"`
	}
	r.decode(t, &def)
	if def.Name != "request_human_input" || def.Description == "" || def.InputSchema["type"] != "object" {
		t.Fatalf("definition %s", r.body)
	}
}

func wantSameJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	a, err1 := contracts.Canonicalize(got)
	b, err2 := contracts.Canonicalize(json.RawMessage(want))
	if err1 != nil || err2 != nil || string(a) != string(b) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/countersigntest"
)

const decisionsPolicy = `
version: "d1"
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
    approvers: [alice, bob, carol]
    allowed_decisions: [approve, reject, edit, respond]
  - name: mail
    tools: ["email.*"]
    action: require_approval
    allowed_decisions: [approve, reject, respond]
`

// refundSchema is the JSON Schema of the refund tool's arguments.
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

// decisionsGate is a gate over e's server with decisionsPolicy.
func decisionsGate(t *testing.T, e *env) *orchestrator.Gate {
	t.Helper()
	p, err := policy.Parse([]byte(decisionsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	countersigntest.Trust(t, p)
	g, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: e.srv.JetStreamAs(embedded.RoleOrchestrator), Policy: orchestrator.StaticPolicy{P: p}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// publishVote sends v for eventID on the bus, as a trusted NATS resolver does.
func (e *env) publishVote(t *testing.T, eventID, approver string, v contracts.Vote) string {
	t.Helper()
	v.Spec, v.VoteID, v.EventID = contracts.SpecVote, uuid.NewString(), eventID
	v.Approver = contracts.Approver{ID: approver, Via: contracts.ViaNATS}
	v.DecidedAt = time.Now().UTC()
	if _, err := events.Publish(context.Background(), e.js, contracts.ResolvedSubject(eventID), v, v.VoteID, nil); err != nil {
		t.Fatal(err)
	}
	return v.VoteID
}

func (e *env) waitRefused(t *testing.T, eventID, voteID string) contracts.RefusedVote {
	t.Helper()
	rec := e.waitRecord(t, eventID, func(r *contracts.Record) bool {
		for _, rv := range r.RefusedVotes {
			if rv.VoteID == voteID {
				return true
			}
		}
		return false
	})
	for _, rv := range rec.RefusedVotes {
		if rv.VoteID == voteID {
			return rv
		}
	}
	panic("unreachable")
}

type reviewResult struct {
	v   []orchestrator.Verdict
	err error
}

func reviewAsync(t *testing.T, g *orchestrator.Gate, run contracts.Run, calls ...orchestrator.ToolCall) chan reviewResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	ch := make(chan reviewResult, 1)
	go func() {
		v, err := g.Review(ctx, run, calls)
		ch <- reviewResult{v, err}
	}()
	return ch
}

func TestEditValidatedAgainstToolSchema(t *testing.T) {
	e := setup(t)
	g := decisionsGate(t, e)
	ctx := context.Background()
	call := orchestrator.ToolCall{
		ID: "refund-1", Name: "stripe.refund",
		Arguments: json.RawMessage(`{"amount":100,"currency":"eur","reason":"duplicate"}`),
		Schema:    json.RawMessage(refundSchema),
	}
	eventID := orchestrator.EventID(run, call.ID)
	ch := reviewAsync(t, g, run, call)
	rec := e.waitRecord(t, eventID, pending)
	if len(rec.Request.ToolSchema) == 0 {
		t.Fatal("the request does not carry the tool's schema")
	}
	if err := approval.CompileSchema(rec.Request.ToolSchema); err != nil {
		t.Fatalf("the request's tool_schema: %v", err)
	}

	// alice approves the requested arguments: 1 of 2.
	e.publishVote(t, eventID, "alice", contracts.Vote{Decision: contracts.DecisionApprove})
	e.waitRecord(t, eventID, func(r *contracts.Record) bool { return len(r.Votes) == 1 })

	// An edit that fails the schema, straight on the bus, is refused with
	// the schema error's path.
	bad := e.publishVote(t, eventID, "bob", contracts.Vote{
		Decision: contracts.DecisionEdit, Arguments: json.RawMessage(`{"amount":5000,"currency":"eur"}`),
	})
	rv := e.waitRefused(t, eventID, bad)
	if rv.Reason != contracts.ReasonInvalidArguments || !strings.HasPrefix(rv.Detail, "arguments/amount: ") {
		t.Fatalf("refused vote %+v, want invalid_arguments at arguments/amount", rv)
	}

	// bob's valid edit counts as his approval of the new arguments; alice's
	// approval was for other arguments and no longer counts.
	edited := `{"amount":80,"currency":"eur"}`
	e.publishVote(t, eventID, "bob", contracts.Vote{Decision: contracts.DecisionEdit, Arguments: json.RawMessage(edited)})
	rec = e.waitRecord(t, eventID, func(r *contracts.Record) bool { return len(r.Votes) == 2 })
	if rec.Status != contracts.StatusPending {
		t.Fatalf("status %s after an edit with alice's approval of other arguments; want pending", rec.Status)
	}
	sha, _ := contracts.ArgumentsSHA256(json.RawMessage(edited))
	e.publishVote(t, eventID, "carol", contracts.Vote{Decision: contracts.DecisionApprove, ArgumentsSHA256: sha})

	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	v := r.v[0]
	if v.Verdict != orchestrator.VerdictAllowed {
		t.Fatalf("verdict %+v", v)
	}
	if got, _ := contracts.ArgumentsSHA256(v.Arguments); got != sha {
		t.Fatalf("allowed arguments %s, want the edited %s", v.Arguments, edited)
	}
	rec = e.waitRecord(t, eventID, func(r *contracts.Record) bool { return r.Terminal() })
	out := rec.Outcome
	if !sameStrings(out.DecidedBy, "bob", "carol") {
		t.Errorf("decided by %v, want bob and carol", out.DecidedBy)
	}
	if string(rec.Request.ToolCall.Arguments) != `{"amount":100,"currency":"eur","reason":"duplicate"}` {
		t.Errorf("original arguments %s", rec.Request.ToolCall.Arguments)
	}
	wantJSONEqual(t, "diff", out.Diff, `[{"op":"replace","path":"/amount","value":80},{"op":"remove","path":"/reason"}]`)
	if err := v.Permit.Claim(ctx); err != nil {
		t.Fatalf("claim of the edited call: %v", err)
	}
}

func TestReviewRefusesAnUnusableSchema(t *testing.T) {
	e := setup(t)
	for _, s := range []string{`{"type":"nope"}`, `{"$ref":"https://example.com/schema.json"}`, `[1]`} {
		_, err := e.gate.Submit(context.Background(), run, []orchestrator.ToolCall{
			{ID: "c1", Name: "stripe.refund", Arguments: json.RawMessage(`{}`), Schema: json.RawMessage(s)},
		})
		if !errors.Is(err, orchestrator.ErrInvalidSchema) {
			t.Errorf("schema %s: %v, want ErrInvalidSchema", s, err)
		}
	}
}

func TestRespondReturnsTheTextToTheAgent(t *testing.T) {
	e := setup(t)
	g := decisionsGate(t, e)
	call := orchestrator.ToolCall{ID: "mail-1", Name: "email.send", Arguments: json.RawMessage(`{"to":"all@example.com"}`)}
	eventID := orchestrator.EventID(run, call.ID)
	ch := reviewAsync(t, g, run, call)
	e.waitRecord(t, eventID, pending)
	e.publishVote(t, eventID, "alice", contracts.Vote{Decision: contracts.DecisionRespond, Comment: "Send it to the team list only."})
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	v := r.v[0]
	if v.Verdict != orchestrator.VerdictResponded || v.Reason != "Send it to the team list only." || v.Permit != nil {
		t.Fatalf("verdict %+v, want responded with the text and no permit", v)
	}
}

// askAsync asks q in the background and returns the channel of its answer.
func askAsync(t *testing.T, g *orchestrator.Gate, run contracts.Run, q orchestrator.Question) chan struct {
	a   orchestrator.Answer
	err error
} {
	ch := make(chan struct {
		a   orchestrator.Answer
		err error
	}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	go func() {
		a, err := g.Ask(ctx, run, q)
		ch <- struct {
			a   orchestrator.Answer
			err error
		}{a, err}
	}()
	return ch
}

func TestAskAccept(t *testing.T) {
	e := setup(t)
	g := decisionsGate(t, e)
	q := orchestrator.Question{ID: "ask-1", Text: "Which city should I book?", Schema: json.RawMessage(`{
	  "type": "object", "required": ["city"],
	  "properties": {"city": {"type": "string", "minLength": 2}, "nights": {"type": "integer", "minimum": 1}}
	}`)}
	eventID := orchestrator.EventID(run, q.ID)
	ch := askAsync(t, g, run, q)
	rec := e.waitRecord(t, eventID, pending)
	req := rec.Request
	if req.Kind != contracts.KindHumanInput || req.Spec != contracts.SpecHumanInputRequested || req.Question == nil ||
		req.Question.Text != q.Text || req.ToolCall != nil {
		t.Fatalf("request %+v", req)
	}
	if req.Policy.Rule != "questions" || !sameStrings(req.Quorum.Approvers, "alice", "bob") ||
		!sameStrings(req.AllowedDecisions, contracts.DecisionAnswer) {
		t.Fatalf("request rule %s approvers %v decisions %v", req.Policy.Rule, req.Quorum.Approvers, req.AllowedDecisions)
	}
	// The request went out on the human input subject.
	stream, err := e.js.Stream(context.Background(), contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(context.Background(), contracts.InputRequestedSubject(run.Agent)); err != nil {
		t.Fatalf("no message on %s: %v", contracts.InputRequestedSubject(run.Agent), err)
	}

	// carol is not an approver; bob's first answer fails the schema.
	notApprover := e.publishVote(t, eventID, "carol", contracts.Vote{Decision: contracts.DecisionAnswer,
		Answer: &contracts.Answer{Action: orchestrator.ActionAccept, Content: json.RawMessage(`{"city":"Porto"}`)}})
	if rv := e.waitRefused(t, eventID, notApprover); rv.Reason != contracts.ReasonNotAnApprover {
		t.Fatalf("carol's answer: %+v", rv)
	}
	bad := e.publishVote(t, eventID, "bob", contracts.Vote{Decision: contracts.DecisionAnswer,
		Answer: &contracts.Answer{Action: orchestrator.ActionAccept, Content: json.RawMessage(`{"city":"Lisbon","nights":0}`)}})
	if rv := e.waitRefused(t, eventID, bad); rv.Reason != contracts.ReasonInvalidArguments || !strings.HasPrefix(rv.Detail, "answer/content/nights: ") {
		t.Fatalf("invalid answer: %+v", rv)
	}
	e.publishVote(t, eventID, "bob", contracts.Vote{Decision: contracts.DecisionAnswer,
		Answer: &contracts.Answer{Action: orchestrator.ActionAccept, Content: json.RawMessage(`{"city":"Lisbon","nights":3}`)}})
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	a := r.a
	if a.Status != orchestrator.VerdictAnswered || a.Action != orchestrator.ActionAccept || a.AnsweredBy != "bob" || a.EventID != eventID {
		t.Fatalf("answer %+v", a)
	}
	wantJSONEqual(t, "content", a.Content, `{"city":"Lisbon","nights":3}`)
	wantJSONEqual(t, "tool result", json.RawMessage(a.ToolResult()), `{"city":"Lisbon","nights":3}`)

	// Asking again re-attaches and returns the same answer at once.
	again, err := g.Ask(context.Background(), run, q)
	if err != nil || again.Status != orchestrator.VerdictAnswered || string(again.Content) != string(a.Content) {
		t.Fatalf("asking again: %+v, %v", again, err)
	}
	// The same id with another question is refused.
	if _, err := g.Ask(context.Background(), run, orchestrator.Question{ID: "ask-1", Text: "Something else?"}); !errors.Is(err, orchestrator.ErrArgumentsChanged) {
		t.Fatalf("re-used id: %v, want ErrArgumentsChanged", err)
	}
}

func TestAskDeclineAndCancel(t *testing.T) {
	e := setup(t)
	g := decisionsGate(t, e)
	for i, action := range []string{orchestrator.ActionDecline, orchestrator.ActionCancel} {
		q := orchestrator.Question{ID: "ask-" + action, Text: "May I tell the customer about the outage?"}
		eventID := orchestrator.EventID(run, q.ID)
		ch := askAsync(t, g, run, q)
		rec := e.waitRecord(t, eventID, pending)
		// Without a schema the answer is free text.
		wantJSONEqual(t, "default answer schema", rec.Request.Question.Schema, string(orchestrator.DefaultAnswerSchema))
		e.publishVote(t, eventID, []string{"alice", "bob"}[i], contracts.Vote{Decision: contracts.DecisionAnswer, Answer: &contracts.Answer{Action: action}})
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.a.Status != orchestrator.VerdictAnswered || r.a.Action != action || len(r.a.Content) != 0 {
			t.Fatalf("%s: answer %+v", action, r.a)
		}
		if !strings.Contains(r.a.ToolResult(), map[string]string{"decline": "declined", "cancel": "dismissed"}[action]) {
			t.Errorf("%s: tool result %q", action, r.a.ToolResult())
		}
	}
}

func TestAskCancelledAndDenied(t *testing.T) {
	e := setup(t)
	g := decisionsGate(t, e)
	ctx := context.Background()
	q := orchestrator.Question{ID: "ask-x", Text: "Proceed?"}
	eventID := orchestrator.EventID(run, q.ID)
	ch := askAsync(t, g, run, q)
	e.waitRecord(t, eventID, pending)
	cmd := contracts.Command{Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: eventID, Command: contracts.CommandCancel, By: "alice"}
	if _, err := events.Publish(ctx, e.js, contracts.CommandSubject(eventID), cmd, cmd.CommandID, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil || r.a.Status != orchestrator.VerdictCancelled || r.a.Reason == "" {
		t.Fatalf("cancelled question: %+v, %v", r.a, r.err)
	}

	intern := contracts.Run{ID: "run-9", Agent: "intern-bot"}
	a, err := g.Ask(ctx, intern, orchestrator.Question{ID: "q", Text: "Can I deploy?"})
	if err != nil || a.Status != orchestrator.VerdictDenied || a.Reason != "Interns ask their mentor in person." || a.EventID != "" {
		t.Fatalf("denied question: %+v, %v", a, err)
	}

	if _, err := g.Ask(ctx, run, orchestrator.Question{ID: "bad", Text: "?", Schema: json.RawMessage(`{"$ref":"http://127.0.0.1:1/x"}`)}); !errors.Is(err, orchestrator.ErrInvalidSchema) {
		t.Fatalf("remote $ref: %v, want ErrInvalidSchema", err)
	}
	if _, err := g.Ask(ctx, run, orchestrator.Question{ID: "empty"}); err == nil {
		t.Fatal("a question without text was accepted")
	}
}

func TestRequestHumanInputTool(t *testing.T) {
	tool := orchestrator.RequestHumanInputTool
	var def struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := json.Unmarshal(tool.JSON(), &def); err != nil {
		t.Fatal(err)
	}
	if def.Name != "request_human_input" || def.Description == "" {
		t.Fatalf("definition %+v", def)
	}
	if err := approval.CompileSchema(def.InputSchema); err != nil {
		t.Fatalf("input schema: %v", err)
	}
	in := json.RawMessage(`{"question":"Which plan?","answer_schema":{"type":"object","properties":{"plan":{"enum":["a","b"]}}}}`)
	if e := approval.ValidateJSON(def.InputSchema, in, "input"); e != nil {
		t.Fatalf("a valid call fails the input schema: %v", e)
	}
	if e := approval.ValidateJSON(def.InputSchema, json.RawMessage(`{"text":"x"}`), "input"); e == nil {
		t.Fatal("an invalid call passes the input schema")
	}
	q, err := orchestrator.QuestionFromToolCall("call-7", in)
	if err != nil || q.ID != "call-7" || q.Text != "Which plan?" || len(q.Schema) == 0 {
		t.Fatalf("QuestionFromToolCall = %+v, %v", q, err)
	}
	if _, err := orchestrator.QuestionFromToolCall("c", json.RawMessage(`{"question":""}`)); err == nil {
		t.Fatal("an empty question was accepted")
	}
}

func sameStrings(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func wantJSONEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	a, err1 := contracts.Canonicalize(got)
	b, err2 := contracts.Canonicalize(json.RawMessage(want))
	if err1 != nil || err2 != nil || string(a) != string(b) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

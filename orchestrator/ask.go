package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Answer actions, as in MCP elicitation: the human answered (accept), said
// no (decline), or dismissed the question (cancel).
const (
	ActionAccept  = "accept"
	ActionDecline = "decline"
	ActionCancel  = "cancel"
)

// DefaultAnswerSchema is the answer schema of a question that brings none:
// a free-text answer, {"text": "..."}.
var DefaultAnswerSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","minLength":1,"description":"Your answer"}},"required":["text"],"additionalProperties":false}`)

// Question is what an agent asks a human with Ask.
type Question struct {
	// ID names the question within the run, like a tool call id (use the id
	// of the request_human_input call): asking again with the same run and
	// id re-attaches to the same question. Empty asks a new question each time.
	ID   string `json:"id"`
	Text string `json:"text"`
	// Schema is the JSON Schema an accepted answer's content must satisfy
	// (default DefaultAnswerSchema).
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Answer is how a question ended.
type Answer struct {
	EventID string `json:"event_id,omitempty"`
	// Status is VerdictAnswered when a human replied (see Action), else
	// VerdictExpired, VerdictCancelled, VerdictDenied (the policy does not
	// let this agent ask), or VerdictPending (SubmitQuestion only).
	Status string `json:"status"`
	// Action and Content are the human's reply: Content (accept only)
	// satisfies the question's schema.
	Action  string          `json:"action,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	// AnsweredBy is the approver id of the person who replied.
	AnsweredBy string `json:"answered_by,omitempty"`
	// Reason says why there is no answer, in words for the model.
	Reason string `json:"reason,omitempty"`
	// Code is CodeRequestRefused when Countersign refused the question's
	// request itself (Status is then VerdictDenied).
	Code string `json:"code,omitempty"`
	Rule string `json:"rule,omitempty"`
}

// ToolResult is the answer as the result of a request_human_input tool call,
// for the model: the accepted content as JSON, or a sentence saying why
// there is none.
func (a Answer) ToolResult() string {
	switch {
	case a.Status == VerdictAnswered && a.Action == ActionAccept:
		return string(a.Content)
	case a.Status == VerdictAnswered && a.Action == ActionDecline:
		return "The human declined to answer this question."
	case a.Status == VerdictAnswered:
		return "The human dismissed this question without answering."
	case a.Reason != "":
		return a.Reason
	}
	return "No answer is available (" + a.Status + ")."
}

// Ask asks a human the question and blocks until it is answered, expires,
// is cancelled, or ctx ends. Like Review, calling it again with the same
// run and question id after a restart re-attaches to the same question.
// The policy sees the question as a call of the request_human_input tool
// with arguments {"question": text}: its rule picks the approvers, channels
// and timeout; a deny rule answers VerdictDenied without asking anyone.
func (g *Gate) Ask(ctx context.Context, run contracts.Run, q Question) (Answer, error) {
	a, known, err := g.submitQuestion(ctx, run, q)
	if err != nil || a.Status != VerdictPending {
		return a, err
	}
	ch, cancel, err := g.watchAnswer(ctx, a, known)
	if err != nil {
		return a, err
	}
	defer cancel()
	select {
	case ans := <-ch:
		return ans, nil
	case <-ctx.Done():
		return a, ctx.Err()
	}
}

// watchAnswer waits for the answer to pending question a, which it sends
// on ch; known is submitQuestion's.
func (g *Gate) watchAnswer(ctx context.Context, a Answer, known bool) (ch chan Answer, cancel func(), err error) {
	ch = make(chan Answer, 1)
	cancel, err = g.waiter.watchDecision(ctx, a.EventID, &questionWait{pending: a, known: known, ch: ch})
	return ch, cancel, err
}

// questionWait is the wait of a pending question (a waitHandler).
type questionWait struct {
	pending Answer
	known   bool
	ch      chan Answer
}

func (q *questionWait) changed(rec *contracts.Record, _ uint64) bool {
	if !rec.Terminal() {
		return false
	}
	q.ch <- AnswerFor(rec)
	return true
}

func (q *questionWait) decided(d *contracts.Decided) bool {
	ans, ok := decidedAnswer(d, q.pending, q.known)
	if ok {
		q.ch <- ans
	}
	return ok
}

// SubmitQuestion publishes the question (or re-attaches to it) without
// waiting: a question not yet answered gets VerdictPending and its event id.
func (g *Gate) SubmitQuestion(ctx context.Context, run contracts.Run, q Question) (Answer, error) {
	a, _, err := g.submitQuestion(ctx, run, q)
	return a, err
}

// decidedAnswer is the answer to pending question p from its record's
// decided announcement d, without reading the record: AnswerFor of the
// record at d's revision, which holds d's status and outcome and p's rule.
// ok is false, and the record must be read, unless the record's request
// is known to be p's (known, see submitQuestion) and d is for p's record.
func decidedAnswer(d *contracts.Decided, p Answer, known bool) (Answer, bool) {
	if !known || p.EventID == "" || d.EventID != p.EventID || d.Outcome == nil || !decidedStatus(d.Status) {
		return Answer{}, false
	}
	return AnswerFor(&contracts.Record{
		Request: contracts.ApprovalRequested{
			EventID: p.EventID, Kind: contracts.KindHumanInput, Policy: contracts.PolicyRef{Rule: p.Rule},
		},
		Status:  d.Status,
		Outcome: d.Outcome,
	}), true
}

// submitQuestion is SubmitQuestion; known reports, for a pending answer,
// that the question's record is known to hold this question's request
// (the gate read the pending record and checked it, or the stream stored
// the gate's own request as new), with the rule the answer names.
func (g *Gate) submitQuestion(ctx context.Context, run contracts.Run, q Question) (Answer, bool, error) {
	if run.Agent == "" {
		return Answer{}, false, errors.New("orchestrator: run.agent is required")
	}
	if strings.TrimSpace(q.Text) == "" {
		return Answer{}, false, errors.New("orchestrator: question.text is required")
	}
	if len(bytes.TrimSpace(q.Schema)) == 0 || string(bytes.TrimSpace(q.Schema)) == "null" {
		q.Schema = DefaultAnswerSchema
	}
	if err := checkSchema(q.Schema); err != nil {
		return Answer{}, false, fieldErr(ErrInvalidSchema, "question.schema", err, "%s", err.Message)
	}
	if e := g.limits().CheckRequestFields(&contracts.ApprovalRequested{
		Question: &contracts.Question{Text: q.Text, Schema: compactJSON(q.Schema)},
	}); e != nil {
		return Answer{}, false, fmt.Errorf("orchestrator: %w", e)
	}
	args, err := json.Marshal(map[string]string{"question": q.Text})
	if err != nil {
		return Answer{}, false, err
	}
	d := g.cfg.Policy.Current().Evaluate(policy.Input{Run: run, Tool: RequestHumanInputToolName, Arguments: args})
	if d.Action == policy.ActionDeny {
		reason := d.Reason
		if reason == "" {
			reason = "The policy does not allow this agent to ask a human."
		}
		return Answer{Status: VerdictDenied, Reason: reason, Rule: d.Rule}, false, nil
	}
	eventID := EventID(run, q.ID)
	a := Answer{EventID: eventID, Status: VerdictPending, Rule: d.Rule}
	entry, err := g.kv.Get(ctx, eventID)
	switch {
	case err == nil:
		var rec contracts.Record
		if err := contracts.DecodeRecord(eventID, entry.Value(), &rec); err != nil {
			return a, false, fmt.Errorf("orchestrator: record %s is unreadable: %w", eventID, err)
		}
		if rec.Request.Kind != contracts.KindHumanInput || rec.Request.Question == nil || rec.Request.Question.Text != q.Text || !sameSubmitter(ctx, &rec) {
			return a, false, fieldErr(ErrArgumentsChanged, "id", nil, "the run and question id were already used for another question")
		}
		if rec.Terminal() {
			return AnswerFor(&rec), false, nil
		}
		a.Rule = rec.Request.Policy.Rule
		return a, true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return a, false, fmt.Errorf("orchestrator: read record %s: %w", eventID, err)
	}
	req := g.request(run, ToolCall{ID: q.ID, Name: RequestHumanInputToolName}, args, "", d, eventID)
	req.Spec = contracts.SpecHumanInputRequested
	req.Kind = contracts.KindHumanInput
	req.ToolCall = nil
	req.ToolSchema = nil
	req.Sensitive = nil
	req.Question = &contracts.Question{Text: q.Text, Schema: compactJSON(q.Schema)}
	req.AllowedDecisions = []string{contracts.DecisionAnswer}
	// Time never answers for a human: an unanswered question expires.
	req.OnTimeout = contracts.OnTimeoutReject
	if d.Summary == "" {
		req.Summary = fmt.Sprintf("%s asks: %s", run.Agent, truncate(q.Text, 200))
	}
	req.Traceparent = contracts.TraceparentFrom(ctx)
	req.Submitter = submitterFrom(ctx)
	data, err := g.limits().EncodeRequest(&req)
	if err != nil {
		return a, false, fmt.Errorf("orchestrator: %w", err)
	}
	ack, err := events.PublishRaw(ctx, g.cfg.JS, contracts.InputRequestedSubject(run.Agent), data, eventID, nil)
	if err != nil {
		return a, false, fmt.Errorf("orchestrator: %w", err)
	}
	// A duplicate: someone else's question with this event id may hold
	// the record (see Gate.gate).
	return a, ack != nil && !ack.Duplicate, nil
}

// AnswerFor turns a terminal human_input record into its Answer.
func AnswerFor(rec *contracts.Record) Answer {
	a := Answer{EventID: rec.Request.EventID, Rule: rec.Request.Policy.Rule}
	out := rec.Outcome
	if out == nil {
		out = &contracts.Outcome{}
	}
	switch rec.Status {
	case contracts.StatusAnswered:
		a.Status, a.Action = VerdictAnswered, out.Action
		if a.Action == "" {
			a.Action = ActionAccept
		}
		if a.Action == ActionAccept {
			a.Content = bytes.Clone(out.Arguments) // the record is shared with other waits
		}
		if len(out.DecidedBy) > 0 {
			a.AnsweredBy = out.DecidedBy[0]
		}
	case contracts.StatusExpired:
		a.Status, a.Reason = VerdictExpired, "No human answered this question before its deadline."
	case contracts.StatusCancelled:
		a.Status, a.Reason = VerdictCancelled, "This question was cancelled before a human answered it."
	case contracts.StatusRejected:
		a.Status, a.Reason = VerdictDenied, "Unexpected status "+rec.Status+" for a question; no answer."
		if refusal, ok := contracts.RequestRefusal(out); ok {
			a.Code, a.Reason = CodeRequestRefused, "Countersign refused to ask this question ("+refusal+
				"): it does not match the policy in force. Tell an operator."
		}
	default:
		a.Status, a.Reason = VerdictDenied, "Unexpected status "+rec.Status+" for a question; no answer."
	}
	return a
}

// checkSchema checks an optional JSON Schema.
func checkSchema(raw json.RawMessage) *Error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := approval.CompileSchema(raw); err != nil {
		return fieldErr(ErrInvalidSchema, "", err, "%v", err)
	}
	return nil
}

// compactJSON drops insignificant white space; nil stays nil.
func compactJSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

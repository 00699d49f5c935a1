package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/tracing"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Limits of a review request.
const (
	maxToolCalls = 256
	maxIDLength  = 256
	maxLabels    = 64
)

// recordVisibleWait is how long a review waits for the arbiter to create
// the records of its gated calls, so the event ids it returns can be read
// at once. The request is durable either way.
const recordVisibleWait = 5 * time.Second

type reviewRequest struct {
	Run       reviewRun        `json:"run"`
	ToolCalls []reviewToolCall `json:"tool_calls"`
}

type reviewRun struct {
	ID          string `json:"id"`
	ThreadID    string `json:"thread_id"`
	Agent       string `json:"agent"`
	RequestedBy string `json:"requested_by"`
	Owner       string `json:"owner"`
	Tenant      string `json:"tenant"`
	// Labels the policy can match on (env, team, ...).
	Labels map[string]string `json:"labels"`
}

type reviewToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// ToolSchema is the JSON Schema of the tool's arguments (optional);
	// a human's edit must satisfy it.
	ToolSchema json.RawMessage `json:"tool_schema"`
}

type reviewResult struct {
	ToolCallID string `json:"tool_call_id"`
	Verdict    string `json:"verdict"`
	EventID    string `json:"event_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Code is request_refused when Countersign refused the call's approval
	// request (the verdict is then denied; the record's outcome says why).
	Code      string          `json:"code,omitempty"`
	Rule      string          `json:"rule,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Edited says a human approved other arguments than were proposed;
	// Diff is the change (RFC 6902 JSON Patch from the proposed arguments).
	Edited bool            `json:"edited,omitempty"`
	Diff   json.RawMessage `json:"diff,omitempty"`
	// GrantID names the standing grant that allowed the call without a
	// new request.
	GrantID string `json:"grant_id,omitempty"`
	// Receipt is the receipt the API signed for a call allowed without an
	// approval: under a standing grant, or by a rule with receipt: true.
	Receipt string `json:"receipt,omitempty"`
	// Shadow is what the policy's shadow rules would have decided for the
	// call (never enforced; see docs/policy.md#shadow-rules).
	Shadow []contracts.ShadowVerdict `json:"shadow,omitempty"`
	// Explain (with ?explain=1) says how the policy in force decides the
	// call, rule by rule.
	Explain *explanation `json:"explain,omitempty"`
}

type explanation struct {
	Action  string        `json:"action"`
	Rule    string        `json:"rule"`
	Version string        `json:"version"`
	Error   string        `json:"error,omitempty"`
	Steps   []policy.Step `json:"steps"`
}

type reviewAnswer struct {
	Results []reviewResult `json:"results"`
}

// postReviews answers POST /v1/reviews[?wait=30s].
func (s *Server) postReviews(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	if !s.allow(w, s.reviewRate, p, 1, "reviews and questions") {
		return
	}
	in, aerr := s.readReview(w, r, p)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The approvals this review creates are reserved until their records
	// exist, so concurrent reviews cannot pass the quota together.
	release, ok := s.reservePending(w, p.Subject, in.run.Tenant, s.newApprovals(in.run, in.calls))
	if !ok {
		return
	}
	var created []string
	defer func() { release(created...) }()
	verdicts, created, aerr := s.submitReview(r.Context(), p.Subject, in)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	traceReview(r.Context(), in, verdicts)
	s.awaitVerdicts(r.Context(), verdicts, in.hashes, in.wait)
	writeJSON(w, http.StatusOK, s.reviewAnswer(in, verdicts))
}

// traceReview names on the review's span the tools, verdicts, rules and
// approvals of a review (never its arguments).
func traceReview(ctx context.Context, in *reviewInput, verdicts []orchestrator.Verdict) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var tools, decisions, rules, ids []string
	for i, v := range verdicts {
		if i < len(in.calls) {
			tools = append(tools, in.calls[i].Name)
		}
		decisions, rules = append(decisions, v.Verdict), append(rules, v.Rule)
		if v.EventID != "" {
			ids = append(ids, v.EventID)
		}
	}
	span.SetAttributes(tracing.AttrTool.StringSlice(tools), tracing.AttrDecision.StringSlice(decisions),
		tracing.AttrRule.StringSlice(rules), tracing.AttrEventID.StringSlice(ids))
}

// reviewInput is a review request read, checked and scoped to its caller.
type reviewInput struct {
	run    contracts.Run
	calls  []orchestrator.ToolCall
	hashes []string
	wait   time.Duration
	// explain asks for each call's policy explanation.
	explain bool
}

// readReview reads a review request's query and body, checks them and
// scopes the run to p.
func (s *Server) readReview(w http.ResponseWriter, r *http.Request, p *Principal) (*reviewInput, *Error) {
	wait, aerr := parseWait(r)
	if aerr != nil {
		return nil, aerr
	}
	explain, aerr := parseFlag(r, "explain")
	if aerr != nil {
		return nil, aerr
	}
	var req reviewRequest
	if aerr := decodeBody(w, r, &req, false); aerr != nil {
		return nil, aerr
	}
	hashes, aerr := validateReview(&req, s.limits())
	if aerr != nil {
		return nil, aerr
	}
	run := req.Run.contractRun()
	if aerr := scopeRun(p, &run); aerr != nil {
		return nil, aerr
	}
	// requested_by names the person the agent acts for, which only the agent
	// runtime knows; the calling token authenticates the agent service, not
	// that person, so it is not substituted for a missing requested_by.
	calls := make([]orchestrator.ToolCall, len(req.ToolCalls))
	for i, c := range req.ToolCalls {
		calls[i] = orchestrator.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments, Schema: c.ToolSchema}
	}
	return &reviewInput{run: run, calls: calls, hashes: hashes, wait: wait, explain: explain}, nil
}

// submitReview submits the review for submitter; created are the pending
// approvals it opened, also when it answers an error.
func (s *Server) submitReview(ctx context.Context, submitter string, in *reviewInput) (verdicts []orchestrator.Verdict, created []string, aerr *Error) {
	// Publishing is the durable step: it is finished even if the client goes away.
	sctx, cancel := context.WithTimeout(orchestrator.WithSubmitter(context.WithoutCancel(ctx), submitter), 30*time.Second)
	verdicts, err := s.cfg.Gate.Submit(sctx, in.run, in.calls)
	cancel()
	for _, v := range verdicts {
		if v.Verdict == orchestrator.VerdictPending {
			created = append(created, v.EventID)
		}
	}
	var oe *orchestrator.Error
	switch {
	case errors.As(err, &oe):
		return nil, created, gateError(oe)
	case errors.Is(err, orchestrator.ErrTooLarge):
		return nil, created, tooLargeError(err, "tool_calls")
	case err != nil:
		return nil, created, s.backendError("submit review", err)
	}
	return verdicts, created, nil
}

// reviewAnswer is the answer to a review whose calls got verdicts.
func (s *Server) reviewAnswer(in *reviewInput, verdicts []orchestrator.Verdict) reviewAnswer {
	ans := reviewAnswer{Results: make([]reviewResult, len(verdicts))}
	for i, v := range verdicts {
		ans.Results[i] = reviewResult{
			ToolCallID: v.ToolCallID, Verdict: v.Verdict, EventID: v.EventID, Reason: v.Reason, Code: v.Code, Rule: v.Rule,
			Arguments: v.Arguments, Edited: v.Edited, Diff: v.Diff, GrantID: v.GrantID, Shadow: v.Shadow,
		}
		if c, ok := v.Permit.ReceiptClaims(); ok {
			ans.Results[i].Receipt = s.signReceipt(c)
		}
		if in.explain {
			d, steps, err := s.cfg.Gate.Explain(in.run, in.calls[i])
			if err == nil {
				ans.Results[i].Explain = &explanation{Action: d.Action, Rule: d.Rule, Version: d.Version, Error: d.Error, Steps: steps}
			}
		}
	}
	return ans
}

// validateReview refuses a request before anything is published, so a bad
// call never leaves the calls before it half submitted. It returns the
// arguments hash of every call.
func validateReview(req *reviewRequest, lim contracts.Limits) ([]string, *Error) {
	bad := func(field, format string, args ...any) *Error {
		return fieldError(http.StatusBadRequest, CodeInvalidField, field, format, args...)
	}
	if aerr := validateRun(&req.Run); aerr != nil {
		return nil, aerr
	}
	if len(req.ToolCalls) == 0 {
		return nil, bad("tool_calls", "tool_calls must list at least one call")
	}
	if len(req.ToolCalls) > maxToolCalls {
		return nil, bad("tool_calls", "tool_calls lists more than %d calls", maxToolCalls)
	}
	hashes := make([]string, len(req.ToolCalls))
	seen := map[string]int{}
	for i, c := range req.ToolCalls {
		at := fmt.Sprintf("tool_calls[%d]", i)
		if strings.TrimSpace(c.Name) == "" {
			return nil, bad(at+".name", "%s.name is required", at)
		}
		if len(c.Name) > maxIDLength || len(c.ID) > maxIDLength {
			return nil, bad(at, "%s.id and .name must be at most %d bytes", at, maxIDLength)
		}
		if c.ID != "" {
			if j, dup := seen[c.ID]; dup {
				return nil, bad(at+".id", "%s.id %q is also the id of tool_calls[%d]", at, c.ID, j)
			}
			seen[c.ID] = i
		}
		args := strings.TrimSpace(string(c.Arguments))
		if args == "" || args == "null" {
			args = "{}"
		}
		if args[0] != '{' {
			return nil, fieldError(http.StatusBadRequest, CodeInvalidArguments, at+".arguments", "%s.arguments must be a JSON object", at)
		}
		canon, err := contracts.Canonicalize([]byte(args))
		if err != nil {
			return nil, fieldError(http.StatusBadRequest, CodeInvalidArguments, at+".arguments", "%s.arguments: %v", at, err)
		}
		hashes[i] = contracts.CanonicalSHA256(canon)
		if aerr := checkSchemaField(c.ToolSchema, at+".tool_schema"); aerr != nil {
			return nil, aerr
		}
		// The arguments and schema must fit the size budget: a request whose
		// record could not reach a decision is refused here, not accepted.
		if e := lim.CheckRequestFields(&contracts.ApprovalRequested{
			ToolCall: &contracts.ToolCall{Arguments: canon}, ToolSchema: c.ToolSchema,
		}); e != nil {
			field := at + "." + map[string]string{"tool_call.arguments": "arguments", "tool_schema": "tool_schema"}[e.Field]
			e.Message = strings.Replace(e.Message, e.Field, field, 1)
			e.Field = field
			return nil, contractError(e)
		}
	}
	return hashes, nil
}

// validateRun checks the run of a review or question.
func validateRun(run *reviewRun) *Error {
	bad := func(field, format string, args ...any) *Error {
		return fieldError(http.StatusBadRequest, CodeInvalidField, field, format, args...)
	}
	if strings.TrimSpace(run.Agent) == "" {
		return bad("run.agent", "run.agent is required")
	}
	for field, v := range map[string]string{
		"run.id": run.ID, "run.thread_id": run.ThreadID, "run.agent": run.Agent,
		"run.requested_by": run.RequestedBy, "run.owner": run.Owner, "run.tenant": run.Tenant,
	} {
		if len(v) > maxIDLength {
			return bad(field, "%s is longer than %d bytes", field, maxIDLength)
		}
	}
	if len(run.Labels) > maxLabels {
		return bad("run.labels", "run.labels has more than %d labels", maxLabels)
	}
	for k, v := range run.Labels {
		if k == "" || len(k) > maxIDLength || len(v) > maxIDLength {
			return bad("run.labels", "run.labels keys must be 1 to %d bytes and values at most %d", maxIDLength, maxIDLength)
		}
	}
	return nil
}

// contractRun is the contract's run of a validated request body.
func (r reviewRun) contractRun() contracts.Run {
	return contracts.Run{
		ID: r.ID, ThreadID: r.ThreadID, Agent: r.Agent, RequestedBy: r.RequestedBy, Owner: r.Owner,
		Tenant: r.Tenant, Labels: r.Labels,
	}
}

// awaitVerdicts waits on the pending verdicts: until every record exists
// (briefly) or, with a wait, until every one is terminal or the wait
// elapses. Verdicts that turned terminal are filled in; the others stay
// pending.
func (s *Server) awaitVerdicts(ctx context.Context, verdicts []orchestrator.Verdict, hashes []string, wait time.Duration) {
	terminalOnly := wait > 0
	if !terminalOnly {
		wait = recordVisibleWait
	}
	wake := make(chan struct{}, 1)
	watches := map[int]*recordWatch{}
	for i, v := range verdicts {
		if v.Verdict != orchestrator.VerdictPending {
			continue
		}
		w, stop, err := s.index.watch(ctx, v.EventID, wake)
		if err != nil {
			s.log.Warn("waiting on an approval failed; reporting it pending", "event_id", v.EventID, "err", err)
			continue
		}
		defer stop()
		watches[i] = w
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		for i, w := range watches {
			st, ok := w.state()
			switch {
			case ok && st.rec.Terminal():
				verdicts[i] = orchestrator.VerdictFor(st.rec, verdicts[i].ToolCallID, hashes[i])
				delete(watches, i)
			case ok && !terminalOnly:
				delete(watches, i)
			}
		}
		if len(watches) == 0 {
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

// gateError answers an error of the gate with its code, field and message.
func gateError(e *orchestrator.Error) *Error {
	status := http.StatusBadRequest
	if e.Code == CodeArgumentsChanged {
		status = http.StatusConflict
	}
	return fieldError(status, e.Code, e.Field, "%s", e.Message)
}

// tooLargeError is the answer to a request the gate found too large for
// the size budget (after the per-field checks, only a whole request can
// be: its record with room for every terminal state).
func tooLargeError(err error, field string) *Error {
	msg := "it does not fit the size budget of the server's max payload"
	var e *contracts.FieldError
	if errors.As(err, &e) {
		msg = e.Message
	}
	return fieldError(http.StatusRequestEntityTooLarge, CodeTooLarge, field, "%s", msg)
}

// checkSchemaField checks an optional JSON Schema in a request body: it
// must be an object that compiles without fetching anything.
func checkSchemaField(raw json.RawMessage, field string) *Error {
	trimmed := strings.TrimSpace(string(raw))
	if trimmed == "" || trimmed == "null" {
		return nil
	}
	if trimmed[0] != '{' {
		return fieldError(http.StatusBadRequest, CodeInvalidSchema, field, "%s must be a JSON Schema object", field)
	}
	if err := approval.CompileSchema(raw); err != nil {
		return fieldError(http.StatusBadRequest, CodeInvalidSchema, field, "%s: %v", field, err)
	}
	return nil
}

// signReceipt signs the receipt of a call a review allowed without an
// approval; "" when this API holds no signing key or the signing fails.
// Each call gets its own receipt, good for one use: a call reviewed again
// gets a new one.
func (s *Server) signReceipt(c receipt.Claims) string {
	if s.cfg.Receipts == nil {
		s.noSigner.Do(func() {
			s.log.Warn("a call was allowed with a receipt, but this API holds no receipt signing key; it gets none (receipts.api_keys, see docs/receipts.md)",
				"basis", c.Basis, "rule", c.Rule)
		})
		return ""
	}
	tok, err := s.cfg.Receipts.Sign(c)
	if err != nil {
		s.log.Error("receipt not signed", "basis", c.Basis, "tool", c.Tool, "err", err)
		return ""
	}
	return tok
}

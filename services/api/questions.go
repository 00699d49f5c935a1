package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// maxQuestionText bounds a question's text.
const maxQuestionText = contracts.MaxQuestionTextBytes

type questionRequest struct {
	Run reviewRun `json:"run"`
	// ID names the question within the run (use the id of the
	// request_human_input tool call): asking again re-attaches.
	ID       string       `json:"id"`
	Question questionBody `json:"question"`
}

type questionBody struct {
	Text   string          `json:"text"`
	Schema json.RawMessage `json:"schema"`
}

// questionAnswer is the state of a question: pending, or how it ended.
type questionAnswer struct {
	EventID string      `json:"event_id,omitempty"`
	Status  string      `json:"status"`
	Answer  *answerPart `json:"answer,omitempty"`
	// Reason says why there is no answer, in words for the model.
	Reason string `json:"reason,omitempty"`
	// Code is request_refused when Countersign refused the question's request.
	Code string `json:"code,omitempty"`
	Rule string `json:"rule,omitempty"`
}

type answerPart struct {
	Action     string          `json:"action"`
	Content    json.RawMessage `json:"content,omitempty"`
	AnsweredBy string          `json:"answered_by,omitempty"`
}

func newQuestionAnswer(a orchestrator.Answer) questionAnswer {
	out := questionAnswer{EventID: a.EventID, Status: a.Status, Reason: a.Reason, Code: a.Code, Rule: a.Rule}
	if a.Status == orchestrator.VerdictAnswered {
		out.Answer = &answerPart{Action: a.Action, Content: a.Content, AnsweredBy: a.AnsweredBy}
	}
	return out
}

// postQuestions answers POST /v1/questions[?wait=30s]: an agent asks a
// human (hitl.human.input.requested.<agent>).
func (s *Server) postQuestions(w http.ResponseWriter, r *http.Request) {
	if !s.allow(w, s.reviewRate, principalFrom(r.Context()), 1, "reviews and questions") {
		return
	}
	wait, aerr := parseWait(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req questionRequest
	if aerr := decodeBody(w, r, &req, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := validateQuestion(&req); aerr != nil {
		writeError(w, aerr)
		return
	}
	if e := s.limits().CheckRequestFields(&contracts.ApprovalRequested{
		Question: &contracts.Question{Text: req.Question.Text, Schema: req.Question.Schema},
	}); e != nil {
		writeError(w, contractError(e))
		return
	}
	q := orchestrator.Question{ID: req.ID, Text: req.Question.Text, Schema: req.Question.Schema}
	// Publishing is the durable step: it is finished even if the client goes away.
	run := req.Run.contractRun()
	p := principalFrom(r.Context())
	if aerr := scopeRun(p, &run); aerr != nil {
		writeError(w, aerr)
		return
	}
	n := 1
	if run.ID != "" && q.ID != "" && s.index.has(orchestrator.EventID(run, q.ID)) {
		n = 0 // asked again: re-attaches
	}
	release, ok := s.reservePending(w, p.Subject, run.Tenant, n)
	if !ok {
		return
	}
	var created []string
	defer func() { release(created...) }()
	sctx, cancel := context.WithTimeout(orchestrator.WithSubmitter(context.WithoutCancel(r.Context()), p.Subject), 30*time.Second)
	a, err := s.cfg.Gate.SubmitQuestion(sctx, run, q)
	cancel()
	if err == nil && a.Status == orchestrator.VerdictPending {
		created = append(created, a.EventID)
	}
	var oe *orchestrator.Error
	switch {
	case errors.As(err, &oe):
		writeError(w, gateError(oe))
		return
	case errors.Is(err, orchestrator.ErrTooLarge):
		writeError(w, tooLargeError(err, "question"))
		return
	case err != nil:
		writeError(w, s.backendError("submit question", err))
		return
	}
	if a.Status == orchestrator.VerdictPending {
		a = s.awaitAnswer(r.Context(), a, wait)
	}
	writeJSON(w, http.StatusOK, newQuestionAnswer(a))
}

func validateQuestion(req *questionRequest) *Error {
	bad := func(field, format string, args ...any) *Error {
		return fieldError(http.StatusBadRequest, CodeInvalidField, field, format, args...)
	}
	if aerr := validateRun(&req.Run); aerr != nil {
		return aerr
	}
	if len(req.ID) > maxIDLength {
		return bad("id", "id is longer than %d bytes", maxIDLength)
	}
	if strings.TrimSpace(req.Question.Text) == "" {
		return bad("question.text", "question.text is required")
	}
	if len(req.Question.Text) > maxQuestionText {
		return bad("question.text", "question.text must be at most 16 KiB")
	}
	return checkSchemaField(req.Question.Schema, "question.schema")
}

// awaitAnswer waits until the question's record exists (briefly) or, with
// a wait, until it is answered or the wait elapses.
func (s *Server) awaitAnswer(ctx context.Context, a orchestrator.Answer, wait time.Duration) orchestrator.Answer {
	terminalOnly := wait > 0
	if !terminalOnly {
		wait = recordVisibleWait
	}
	wake := make(chan struct{}, 1)
	watch, stop, err := s.index.watch(ctx, a.EventID, wake)
	if err != nil {
		s.log.Warn("waiting on a question failed; reporting it pending", "event_id", a.EventID, "err", err)
		return a
	}
	defer stop()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st, ok := watch.state()
		switch {
		case ok && st.rec.Terminal():
			return orchestrator.AnswerFor(st.rec)
		case ok && !terminalOnly:
			return a
		}
		select {
		case <-wake:
		case <-timer.C:
			return a
		case <-ctx.Done():
			return a
		case <-s.done:
			return a
		}
	}
}

// getRequestHumanInputTool answers GET /v1/tools/request_human_input with
// the ready-made tool definition an agent registers with its model.
func (s *Server) getRequestHumanInputTool(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, orchestrator.RequestHumanInputTool)
}

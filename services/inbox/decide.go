package inbox

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/services/api"
)

// postDecide serves POST /approvals/{event_id}/decide: the form's decision
// is cast as a vote of the signed-in person via the web, through the same
// path as the API's votes (the arbiter decides). A vote that was counted or
// sent is answered with 303 See Other to the request's page, which shows
// the result once (POST/redirect/GET: reloading that page votes nothing);
// an error shows the page again at once, with what the person typed.
func (in *Inbox) postDecide(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("event_id")
	if !contracts.ValidEventID(id) {
		in.message(w, http.StatusNotFound, sess, "There is no such approval.")
		return
	}
	ctx := r.Context()
	rec, aerr := in.api.Record(ctx, sess.p, id, recordWait)
	if aerr != nil {
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	f := r.PostForm
	vote := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.Must(uuid.NewV7()).String(), EventID: id,
		Approver: contracts.Approver{ID: sess.p.Subject, Via: contracts.ViaWeb},
		Comment:  strings.TrimSpace(f.Get("comment")), DecidedAt: in.now().UTC(), ApproverTenants: sess.p.Tenants,
	}
	decision := f.Get("decision")
	var formErr, argsErr string
	editText := ""
	switch decision {
	case contracts.DecisionApprove:
		vote.Decision, vote.ArgumentsSHA256 = contracts.DecisionApprove, f.Get("h")
	case contracts.DecisionReject:
		vote.Decision = contracts.DecisionReject
	case contracts.DecisionEdit:
		vote.Decision, vote.ArgumentsSHA256 = contracts.DecisionEdit, f.Get("h")
		editText = f.Get("arguments")
		args, msg := editedArguments(editText)
		if msg != "" {
			argsErr = msg
		}
		vote.Arguments = args
	case contracts.DecisionRespond:
		vote.Decision = contracts.DecisionRespond
		if vote.Comment == "" {
			formErr = "Write the response: it is returned to the agent as the tool result."
		}
	case contracts.DecisionAnswer:
		vote.Decision = contracts.DecisionAnswer
		vote.Answer = &contracts.Answer{Action: contracts.AnswerAccept, Content: answerContent(f.Get("answer"))}
		if strings.TrimSpace(f.Get("answer")) == "" {
			formErr = "Write an answer, or decline."
		}
	case "decline":
		vote.Decision = contracts.DecisionAnswer
		vote.Answer = &contracts.Answer{Action: contracts.AnswerDecline}
	default:
		formErr = "Unknown decision."
	}
	if len(vote.Comment) > contracts.MaxCommentBytes {
		formErr = "The comment must be at most 16 KiB."
	}
	status := http.StatusOK
	var result, resultErr, code string
	switch {
	case formErr != "" || argsErr != "":
		status, resultErr, code = http.StatusBadRequest, formErr, contracts.ReasonMalformed
		if argsErr != "" {
			code = contracts.ReasonInvalidArguments
		}
	case !sess.p.Has(api.RoleApprover):
		status, resultErr, code = http.StatusForbidden, "Your token cannot vote: it lacks the approver role.", api.CodeForbidden
	default:
		res, err := in.api.Resolver().Vote(ctx, vote)
		switch {
		case err != nil:
			status, resultErr, code = http.StatusServiceUnavailable, "Your vote could not be sent; try again shortly.", api.CodeUnavailable
		case res.InFlight:
			status, result = http.StatusAccepted, "Your vote was sent; the decision is still being recorded."
		case res.Refused != "":
			status, code = contracts.Reason(res.Refused).HTTPStatus(), res.Refused
			resultErr = "Your vote was refused: " + contracts.Reason(res.Refused).Message() + "."
			if res.Refused == contracts.ReasonInvalidArguments && res.Detail != "" {
				if decision == contracts.DecisionEdit {
					argsErr = res.Detail
				} else {
					resultErr += " " + res.Detail
				}
			}
		default:
			result = "Your " + decision + " was counted."
			if res.Record != nil && res.Record.Terminal() {
				result += " " + notifier.OutcomeLine(res.Record) + "."
			}
		}
		if res.Record != nil {
			rec = res.Record
		}
	}
	if fresh, aerr := in.api.Record(ctx, sess.p, id, 0); aerr == nil && (fresh.UpdatedAt.After(rec.UpdatedAt) || fresh.Terminal()) {
		rec = fresh
	}
	in.log.Info("inbox vote", "event_id", id, "vote_id", vote.VoteID, "approver", sess.p.Subject, "decision", decision, "result", orDash(code))
	if resultErr == "" && argsErr == "" {
		kind := flashCounted + decision
		if status == http.StatusAccepted {
			kind = flashInFlight
		}
		setFlash(w, r, id, kind)
		http.Redirect(w, r, "/approvals/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	pg := in.detail(ctx, rec, sess)
	sv := &pg.Status
	sv.Result, sv.ResultError, sv.ResultCode, sv.ArgsError = result, resultErr, code, argsErr
	if resultErr != "" || argsErr != "" {
		// The person's input is kept for another try.
		sv.Comment, sv.Answer = f.Get("comment"), f.Get("answer")
		if decision == contracts.DecisionEdit {
			sv.EditArgs = editText
		}
	}
	in.render(w, status, "detail", pg)
}

// The flash cookie carries the result of a decision across the redirect to
// the request's page, for that page only, once. It holds a code, not text:
// the page words the result itself.
const (
	flashCookie   = "countersign_flash"
	flashCounted  = "counted."
	flashInFlight = "in_flight"
)

func setFlash(w http.ResponseWriter, r *http.Request, id, kind string) {
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: kind, Path: "/approvals/" + id, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overTLS(r), MaxAge: 60,
	})
}

// takeFlash returns the result a redirect after a decision on rec left
// for its page, and clears it; "" when there is none.
func takeFlash(w http.ResponseWriter, r *http.Request, rec *contracts.Record) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: "", Path: "/approvals/" + rec.Request.EventID, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overTLS(r), MaxAge: -1,
	})
	if c.Value == flashInFlight {
		return "Your vote was sent; the decision is still being recorded."
	}
	decision, ok := strings.CutPrefix(c.Value, flashCounted)
	if !ok || (!contracts.ValidDecision(decision) && decision != "decline") {
		return ""
	}
	result := "Your " + decision + " was counted."
	if rec.Terminal() {
		result += " " + notifier.OutcomeLine(rec) + "."
	}
	return result
}

// editedArguments reads the edit form's arguments: a JSON object, compacted.
func editedArguments(text string) (json.RawMessage, string) {
	text = strings.TrimSpace(text)
	if text == "" || text[0] != '{' {
		return nil, "arguments: the new arguments must be a JSON object"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(text)); err != nil {
		return nil, "arguments: not valid JSON: " + err.Error()
	}
	if _, err := contracts.ArgumentsSHA256(b.Bytes()); err != nil {
		return nil, "arguments: " + err.Error()
	}
	return b.Bytes(), ""
}

// answerContent reads an answer: a JSON object as written, any other text
// (an object that repeats a key included) as {"text": ...} (the default
// answer schema).
func answerContent(text string) json.RawMessage {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "{") && contracts.CheckDuplicateKeys([]byte(t)) == nil {
		var b bytes.Buffer
		if json.Compact(&b, []byte(t)) == nil {
			return b.Bytes()
		}
	}
	out, _ := json.Marshal(map[string]string{"text": t})
	return out
}

package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
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
	wv := in.readVote(r.PostForm, sess, id)
	out := in.cast(ctx, sess, &wv)
	if out.rec != nil {
		rec = out.rec
	}
	if fresh, aerr := in.api.Record(ctx, sess.p, id, 0); aerr == nil && (fresh.UpdatedAt.After(rec.UpdatedAt) || fresh.Terminal()) {
		rec = fresh
	}
	in.log.Info("inbox vote", "event_id", id, "vote_id", wv.vote.VoteID, "approver", sess.p.Subject, "decision", wv.decision, "result", orDash(out.code))
	if out.resultErr == "" && wv.argsErr == "" {
		kind := flashCounted + wv.decision
		if out.status == http.StatusAccepted {
			kind = flashInFlight
		}
		setFlash(w, r, id, kind)
		http.Redirect(w, r, "/approvals/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	pg := in.detail(ctx, rec, sess)
	sv := &pg.Status
	sv.Result, sv.ResultError, sv.ResultCode, sv.ArgsError = out.result, out.resultErr, out.code, wv.argsErr
	// The person's input is kept for another try.
	sv.Comment, sv.Answer = r.PostForm.Get("comment"), r.PostForm.Get("answer")
	if wv.decision == contracts.DecisionEdit {
		sv.EditArgs = wv.editText
	}
	in.render(w, out.status, "detail", pg)
}

// webVote is a decision as the inbox's form sent it.
type webVote struct {
	vote     contracts.Vote
	decision string
	// editText is the edit form's arguments as typed.
	editText string
	// formErr and argsErr say what is wrong with the form, if anything.
	formErr, argsErr string
}

// readVote makes the vote of the signed-in person from the decide form.
func (in *Inbox) readVote(f url.Values, sess *session, id string) webVote {
	wv := webVote{decision: f.Get("decision"), vote: contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.Must(uuid.NewV7()).String(), EventID: id,
		Approver: contracts.Approver{ID: sess.p.Subject, Via: contracts.ViaWeb},
		Comment:  strings.TrimSpace(f.Get("comment")), DecidedAt: in.now().UTC(), ApproverTenants: sess.p.Tenants,
	}}
	v := &wv.vote
	switch wv.decision {
	case contracts.DecisionApprove:
		v.Decision, v.ArgumentsSHA256 = contracts.DecisionApprove, f.Get("h")
		v.Grant, wv.formErr = grantFromForm(f)
	case contracts.DecisionReject:
		v.Decision = contracts.DecisionReject
	case contracts.DecisionEdit:
		v.Decision, v.ArgumentsSHA256 = contracts.DecisionEdit, f.Get("h")
		wv.editText = f.Get("arguments")
		v.Arguments, wv.argsErr = editedArguments(wv.editText)
	case contracts.DecisionRespond:
		v.Decision = contracts.DecisionRespond
		if v.Comment == "" {
			wv.formErr = "Write the response: it is returned to the agent as the tool result."
		}
	case contracts.DecisionAnswer:
		v.Decision = contracts.DecisionAnswer
		v.Answer = &contracts.Answer{Action: contracts.AnswerAccept, Content: answerContent(f.Get("answer"))}
		if strings.TrimSpace(f.Get("answer")) == "" {
			wv.formErr = "Write an answer, or decline."
		}
	case "decline":
		v.Decision = contracts.DecisionAnswer
		v.Answer = &contracts.Answer{Action: contracts.AnswerDecline}
	default:
		wv.formErr = "Unknown decision."
	}
	if v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit {
		var msg string
		if v.Passkey, msg = passkeyFromForm(f); msg != "" && wv.formErr == "" {
			wv.formErr = msg
		}
	}
	if len(v.Comment) > contracts.MaxCommentBytes {
		wv.formErr = "The comment must be at most 16 KiB."
	}
	return wv
}

// voteOutcome is what became of a web vote: the page's status and result
// (or error, with its code), and the record the answer brought.
type voteOutcome struct {
	status                  int
	result, resultErr, code string
	rec                     *contracts.Record
}

// cast sends wv through the API's vote path, unless the form is wrong or
// the person's token cannot vote. A refused edit's schema error is shown
// next to the arguments (wv.argsErr).
func (in *Inbox) cast(ctx context.Context, sess *session, wv *webVote) voteOutcome {
	switch {
	case wv.formErr != "" || wv.argsErr != "":
		if wv.argsErr != "" {
			return voteOutcome{status: http.StatusBadRequest, resultErr: wv.formErr, code: contracts.ReasonInvalidArguments}
		}
		return voteOutcome{status: http.StatusBadRequest, resultErr: wv.formErr, code: contracts.ReasonMalformed}
	case !sess.p.Has(api.RoleApprover):
		return voteOutcome{status: http.StatusForbidden, resultErr: "Your token cannot vote: it lacks the approver role.", code: api.CodeForbidden}
	}
	res, err := in.api.Resolver().Vote(ctx, wv.vote)
	out := voteOutcome{status: http.StatusOK, rec: res.Record}
	switch {
	case err != nil:
		out.status, out.resultErr, out.code = http.StatusServiceUnavailable, "Your vote could not be sent; try again shortly.", api.CodeUnavailable
	case res.InFlight:
		out.status, out.result = http.StatusAccepted, "Your vote was sent; the decision is still being recorded."
	case res.Refused != "":
		out.status, out.code = contracts.Reason(res.Refused).HTTPStatus(), res.Refused
		out.resultErr = "Your vote was refused: " + contracts.Reason(res.Refused).Message() + "."
		if res.Refused == contracts.ReasonGrantNotAllowed && res.Detail != "" {
			out.resultErr += " " + res.Detail
		}
		if res.Refused == contracts.ReasonInvalidArguments && res.Detail != "" {
			if wv.decision == contracts.DecisionEdit {
				wv.argsErr = res.Detail
			} else {
				out.resultErr += " " + res.Detail
			}
		}
	default:
		out.result = counted(wv.decision)
	}
	return out
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
	return counted(decision)
}

// counted confirms a person's counted vote. The outcome, when the vote
// decided the request, is the status's to say, once.
func counted(decision string) string {
	switch decision {
	case contracts.DecisionApprove:
		return "Your approval was counted."
	case contracts.DecisionReject:
		return "Your rejection was counted."
	case contracts.DecisionEdit:
		return "Your approval with edited arguments was counted."
	case contracts.DecisionRespond:
		return "Your response was counted."
	case contracts.DecisionAnswer:
		return "Your answer was counted."
	case "decline":
		return "Your decline was counted."
	}
	return "Your vote was counted."
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

// grantFromForm reads the grant the approve form asks for: none, or a run
// or agent grant for a time, of the same arguments or of those a
// condition admits. The arbiter checks it against the request's rule.
func grantFromForm(f url.Values) (*contracts.GrantRequest, string) {
	scope := f.Get("grant_scope")
	switch scope {
	case "", contracts.GrantScopeCall:
		return nil, ""
	case contracts.GrantScopeRun, contracts.GrantScopeAgent:
	default:
		return nil, "Unknown grant scope."
	}
	g := &contracts.GrantRequest{Scope: scope, TTL: strings.TrimSpace(f.Get("grant_ttl")), Arguments: contracts.GrantArgumentsSame}
	if g.TTL == "" {
		return nil, "Say for how long the decision is remembered, such as 1h."
	}
	if when := strings.TrimSpace(f.Get("grant_when")); when != "" {
		g.Arguments, g.Condition = contracts.GrantArgumentsCondition, when
	}
	return g, ""
}

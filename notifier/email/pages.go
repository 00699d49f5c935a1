package email

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// maxFormBytes bounds a posted form.
const maxFormBytes = 64 << 10

// maxCommentBytes bounds a reason or a response typed on the page.
const maxCommentBytes = contracts.MaxCommentBytes

// Decisions a page's form posts as "decision".
const (
	formApprove = "approve"
	formReject  = "reject"
	formRespond = "respond"
	formAnswer  = "answer"
	formDecline = "decline"
)

// PagesConfig configures the confirmation pages.
type PagesConfig struct {
	// Links verifies the tokens; the Channel's Links. Required.
	Links *Links
	// Resolver reads records and casts votes. Required.
	Resolver notifier.Resolver
	// ReadRule says whether the approver a link was issued to may read the
	// request now (notifier.MayTell against the live directory): a page
	// for someone who may not is answered exactly as for a request that
	// does not exist, on GET and POST alike. nil lets every link's
	// approver read its request (a deployment without tenants or a
	// directory); serve always sets it.
	ReadRule notifier.ReadRule
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Logger receives one line per vote cast; discarded by default.
	Logger *slog.Logger
}

// NewPages returns the handler of the pages personal links open, to be
// mounted for the path prefix "/e/": mux.Handle("/e/", pages). The token is
// the last path segment; a handler registered with the pattern
// "/e/{token}" gets it from r.PathValue("token").
//
// GET (and HEAD) /e/{token} verifies the token and shows the request with a
// form; it never votes, since mail scanners and link previews fetch links.
// Only a POST of that form to the same URL casts the vote, with the
// approver from the token, via "email", and the link's next vote id
// (VoteID(claims) first): a link answers once with a counted vote; a vote
// the arbiter refuses leaves the form in place. Every response carries no-referrer, no-store and a
// restrictive Content-Security-Policy.
func NewPages(cfg PagesConfig) (http.Handler, error) {
	var errs []error
	if cfg.Links == nil {
		errs = append(errs, errors.New("Links: required"))
	}
	if cfg.Resolver == nil {
		errs = append(errs, errors.New("Resolver: required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("email: pages config: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &pages{cfg: cfg}, nil
}

type pages struct {
	cfg PagesConfig
}

// pageView is what page.html shows: a notice, the request, a form.
type pageView struct {
	Heading    string
	Notice     string
	NoticeKind string // "ok", "info" or "error"
	Detail     string
	Request    *pageRequest
	Form       *pageForm
}

type pageRequest struct {
	requestView
	Status  string
	Outcome string
	Edited  string // who edited the arguments shown, if anyone
	Schema  string
}

type pageForm struct {
	// Hash names the arguments the page shows, or Version does when some
	// of their values are masked (see notifier.ArgumentsVersion).
	Hash       string
	Version    string
	HumanInput bool
	Approve    bool
	Reject     bool
	Respond    bool
	// SignURL, for a request whose approvals need a passkey, is its inbox
	// page (on the same server as these pages), where approving is
	// signing; the form then offers no Approve.
	SignURL  string
	Approver string
	// Values typed before an error, shown again.
	Comment, Response, Answer string
}

func (p *pages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		p.show(w, r)
	case http.MethodPost:
		p.answer(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		p.write(w, r, http.StatusMethodNotAllowed, pageView{
			Heading: "Method not allowed", NoticeKind: "error",
			Notice: "This page can only be opened (GET) or answered with its form (POST).",
		})
	}
}

// token returns the link token of r: the "token" path value, else the last
// path segment.
func token(r *http.Request) string {
	if t := r.PathValue("token"); t != "" {
		return t
	}
	p := r.URL.Path
	if i := strings.LastIndex(p, "/e/"); i >= 0 {
		return p[i+len("/e/"):]
	}
	return strings.TrimPrefix(p, "/")
}

// verify checks r's token, writing the error page when it fails.
func (p *pages) verify(w http.ResponseWriter, r *http.Request) (Claims, bool) {
	claims, err := p.cfg.Links.Verify(token(r), p.cfg.Now())
	switch {
	case err == nil:
		return claims, true
	case errors.Is(err, ErrTokenExpired):
		p.write(w, r, http.StatusGone, pageView{
			Heading: "This link has expired", NoticeKind: "error", Notice: "This link has expired.",
			Detail: "Links in approval emails stop working when the request expires. Open the request in the Countersign inbox instead.",
		})
	default:
		p.write(w, r, http.StatusBadRequest, pageView{
			Heading: "This link is not valid", NoticeKind: "error", Notice: "This link is not valid.",
			Detail: "Copy the whole link from the email, or open the request in the Countersign inbox.",
		})
	}
	return Claims{}, false
}

// record loads the record of claims, writing the error page when it fails.
func (p *pages) record(w http.ResponseWriter, r *http.Request, claims Claims) (*contracts.Record, bool) {
	rec, err := p.cfg.Resolver.Record(r.Context(), claims.EventID)
	if err == nil && rec != nil && p.cfg.ReadRule != nil {
		var may bool
		if may, err = p.cfg.ReadRule(r.Context(), claims.Approver, rec); err == nil && !may {
			// Not theirs to read: as if it did not exist.
			rec = nil
		}
	}
	switch {
	case err == nil && rec != nil:
		return rec, true
	case errors.Is(err, notifier.ErrUnknownEvent) || err == nil:
		p.write(w, r, http.StatusNotFound, pageView{
			Heading: "Request not found", NoticeKind: "error",
			Notice: "This request does not exist (or has been removed).",
		})
	default:
		p.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "email page: reading the record failed",
			slog.String(logEventID, claims.EventID), slog.String(logErr, err.Error()))
		p.write(w, r, http.StatusServiceUnavailable, pageView{
			Heading: "Try again", NoticeKind: "error",
			Notice: "Countersign could not load this request just now. Reload the page in a moment.",
		})
	}
	return nil, false
}

// show is GET and HEAD: the request and, while this link can still answer,
// the form. It never votes.
func (p *pages) show(w http.ResponseWriter, r *http.Request) {
	claims, ok := p.verify(w, r)
	if !ok {
		return
	}
	rec, ok := p.record(w, r, claims)
	if !ok {
		return
	}
	view := p.requestPage(rec, claims)
	if p.closedNotice(&view, rec, claims) {
		p.write(w, r, http.StatusOK, view)
		return
	}
	refusedNotice(&view, rec, claims)
	view.Form = newForm(rec, claims)
	p.write(w, r, http.StatusOK, view)
}

// linkState is what the link of some claims has done to a record: the vote
// it got counted, if any; the votes of it the arbiter refused, oldest first;
// and the id its next vote gets. Only a counted vote uses a link up.
type linkState struct {
	counted *contracts.Vote
	refused []contracts.RefusedVote
	next    string
}

func linkVotes(rec *contracts.Record, claims Claims) linkState {
	refused := make(map[string]contracts.RefusedVote, len(rec.RefusedVotes))
	for _, v := range rec.RefusedVotes {
		refused[v.VoteID] = v
	}
	var st linkState
	// The link's n-th vote is only cast after its first n were refused, so
	// the walk ends at the first id the record does not hold.
	for n := 0; ; n++ {
		id := AttemptVoteID(claims, n)
		for i := range rec.Votes {
			if rec.Votes[i].VoteID == id {
				st.counted = &rec.Votes[i]
				return st
			}
		}
		v, ok := refused[id]
		if !ok {
			st.next = id
			return st
		}
		st.refused = append(st.refused, v)
	}
}

// closedNotice sets the notice when claims can no longer answer rec: this
// link's vote was counted, its approver voted another way, or the request
// is decided. It returns false when the form should be shown.
func (p *pages) closedNotice(view *pageView, rec *contracts.Record, claims Claims) bool {
	if v := linkVotes(rec, claims).counted; v != nil {
		view.NoticeKind, view.Notice = "info", "You already answered with this link: "+decisionLabel(v.Decision, v.Answer)+"."
		view.Detail = outcomeDetail(rec)
		return true
	}
	if rec.Terminal() {
		view.NoticeKind, view.Notice = "info", "This request is closed: "+notifier.OutcomeLine(rec)+"."
		return true
	}
	for _, v := range rec.Votes {
		if v.Approver.ID == claims.Approver {
			view.NoticeKind = "info"
			view.Notice = "You already answered this request" + via(v.Approver.Via) + ": " + decisionLabel(v.Decision, v.Answer) + "."
			view.Detail = "The request is still waiting for others: " + notifier.Progress(&rec.Request, rec) + "."
			return true
		}
	}
	return false
}

// refusedNotice says, above a form, that the link's last answer was not
// counted and why.
func refusedNotice(view *pageView, rec *contracts.Record, claims Claims) {
	st := linkVotes(rec, claims)
	if len(st.refused) == 0 {
		return
	}
	v := st.refused[len(st.refused)-1]
	view.NoticeKind = "info"
	view.Notice = "Your last answer with this link (" + decisionLabel(v.Decision, nil) + ") was not counted: " +
		contracts.Reason(v.Reason).Message() + "." + detailSuffix(v.Detail)
	view.Detail = "This link can still answer."
}

func via(channel string) string {
	if channel == "" {
		return ""
	}
	return " via " + channel
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " (" + oneLine(d) + ")"
}

func outcomeDetail(rec *contracts.Record) string {
	if rec.Terminal() {
		return "The request is closed: " + notifier.OutcomeLine(rec) + "."
	}
	return "The request is still waiting for others: " + notifier.Progress(&rec.Request, rec) + "."
}

// decisionLabel names a decision for people.
func decisionLabel(decision string, a *contracts.Answer) string {
	switch decision {
	case contracts.DecisionApprove:
		return "Approve"
	case contracts.DecisionReject:
		return "Reject"
	case contracts.DecisionEdit:
		return "Approve with edits"
	case contracts.DecisionRespond:
		return "Respond"
	case contracts.DecisionAnswer:
		if a != nil && a.Action != contracts.AnswerAccept {
			return "Decline"
		}
		return "Answer"
	}
	return oneLine(decision)
}

// requestPage shows rec as claims' approver sees it.
func (p *pages) requestPage(rec *contracts.Record, claims Claims) pageView {
	req := notifier.ForRecord(rec) // values its edits added are masked too
	if !rec.ExpiresAt.IsZero() {
		req.ExpiresAt = rec.ExpiresAt
	}
	pr := &pageRequest{
		requestView: newRequestView(&req, false, p.cfg.Now()),
		Status:      rec.Status,
	}
	pr.Approver = oneLine(claims.Approver)
	if pr.Progress != "" {
		pr.Progress = notifier.Progress(&rec.Request, rec)
	}
	if rec.Terminal() {
		pr.Outcome = notifier.OutcomeLine(rec)
	}
	if args, editor := currentArguments(rec); editor != "" {
		pr.Arguments = block(notifier.FormatJSON(notifier.ShownArguments(&req, args), maxArguments))
		pr.Edited = editor
	}
	if req.Question != nil && len(req.Question.Schema) > 0 {
		pr.Schema = block(notifier.FormatJSON(req.Question.Schema, maxArguments))
	}
	return pageView{Heading: pr.Title, Request: pr}
}

// currentArguments returns the arguments now under review and who edited
// them last, or the requested arguments and "".
func currentArguments(rec *contracts.Record) (json.RawMessage, string) {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		if v := rec.Votes[i]; v.Decision == contracts.DecisionEdit {
			return v.Arguments, v.Approver.ID
		}
	}
	if rec.Request.ToolCall != nil {
		return rec.Request.ToolCall.Arguments, ""
	}
	return nil, ""
}

// currentHash is the arguments_sha256 of the arguments now under review.
func currentHash(rec *contracts.Record) string {
	args, editor := currentArguments(rec)
	if editor == "" {
		if rec.Request.ToolCall == nil {
			return ""
		}
		return rec.Request.ToolCall.ArgumentsSHA256
	}
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		return ""
	}
	return sha
}

// allowed reports whether the request accepts decision (an empty list
// accepts all).
func allowed(req *contracts.ApprovalRequested, decision string) bool {
	return len(req.AllowedDecisions) == 0 || slices.Contains(req.AllowedDecisions, decision)
}

func newForm(rec *contracts.Record, claims Claims) *pageForm {
	req := &rec.Request
	f := &pageForm{Approver: claims.Approver}
	if req.Kind == contracts.KindHumanInput {
		f.HumanInput = true
		return f
	}
	if len(notifier.ForRecord(rec).Sensitive) > 0 {
		f.Version = notifier.ArgumentsVersion(rec)
	} else {
		f.Hash = currentHash(rec)
	}
	f.Approve = allowed(req, contracts.DecisionApprove)
	if f.Approve && notifier.NeedsPasskey(req) {
		f.Approve, f.SignURL = false, "/approvals/"+url.PathEscape(req.EventID)
	}
	f.Reject = allowed(req, contracts.DecisionReject)
	f.Respond = allowed(req, contracts.DecisionRespond)
	return f
}

// formError shows the form again with what was typed and an error.
func (p *pages) formError(w http.ResponseWriter, r *http.Request, rec *contracts.Record, claims Claims, status int, msg string) {
	view := p.requestPage(rec, claims)
	view.Form = newForm(rec, claims)
	view.Form.Comment = r.PostForm.Get("comment")
	view.Form.Response = r.PostForm.Get("response")
	view.Form.Answer = r.PostForm.Get("answer")
	view.NoticeKind, view.Notice = "error", msg
	p.write(w, r, status, view)
}

// answer is POST: it checks the token and the form again and casts the vote.
func (p *pages) answer(w http.ResponseWriter, r *http.Request) {
	claims, ok := p.verify(w, r)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		status := http.StatusBadRequest
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			status = http.StatusRequestEntityTooLarge
		}
		p.write(w, r, status, pageView{Heading: "Not sent", NoticeKind: "error",
			Notice: "The form could not be read. Go back, shorten what you typed, and send it again."})
		return
	}
	rec, ok := p.record(w, r, claims)
	if !ok {
		return
	}
	// The same link posted twice, or a request decided meanwhile: say so
	// without voting.
	if view := p.requestPage(rec, claims); p.closedNotice(&view, rec, claims) {
		p.write(w, r, http.StatusConflict, view)
		return
	}
	vote, msg := p.buildVote(r, rec, claims, linkVotes(rec, claims).next)
	if msg != "" {
		status := http.StatusBadRequest
		if strings.HasPrefix(msg, staleNotice) {
			status = http.StatusConflict
		}
		p.formError(w, r, rec, claims, status, msg)
		return
	}
	res, err := p.cfg.Resolver.Vote(r.Context(), vote)
	log := p.cfg.Logger.With(slog.String(logEventID, claims.EventID), slog.String(logApprover, claims.Approver),
		slog.String(logVoteID, vote.VoteID), slog.String(logDecision, vote.Decision))
	if err != nil {
		if errors.Is(err, notifier.ErrUnknownEvent) {
			p.write(w, r, http.StatusNotFound, pageView{Heading: "Request not found", NoticeKind: "error",
				Notice: "This request does not exist (or has been removed)."})
			return
		}
		log.LogAttrs(r.Context(), slog.LevelWarn, "email vote failed", slog.String(logErr, err.Error()))
		p.formError(w, r, rec, claims, http.StatusServiceUnavailable,
			"Your answer could not be sent just now. Sending it again is safe: this link answers once.")
		return
	}
	p.result(w, r, rec, claims, vote, res, log)
}

// staleNotice starts the message shown when the arguments changed.
const staleNotice = "The arguments changed"

// buildVote reads the form into a vote, or returns a message for the person.
// The vote gets voteID: the link's next vote id.
func (p *pages) buildVote(r *http.Request, rec *contracts.Record, claims Claims, voteID string) (contracts.Vote, string) {
	req := &rec.Request
	form := r.PostForm
	v := contracts.Vote{
		Spec:      contracts.SpecVote,
		VoteID:    voteID,
		EventID:   claims.EventID,
		Approver:  contracts.Approver{ID: claims.Approver, Via: contracts.ViaEmail},
		Comment:   strings.TrimSpace(form.Get("comment")),
		DecidedAt: p.cfg.Now().UTC(),
	}
	human := req.Kind == contracts.KindHumanInput
	decision := form.Get("decision")
	switch {
	case decision == "":
		return v, "Choose one of the buttons to answer."
	case human && (decision == formAnswer || decision == formDecline):
		v.Decision = contracts.DecisionAnswer
	case !human && (decision == formApprove || decision == formReject || decision == formRespond):
		v.Decision = decision
	default:
		return v, "This decision is not possible for this request."
	}
	if !allowed(req, v.Decision) {
		return v, "This decision is not allowed for this request."
	}
	if v.Decision == contracts.DecisionApprove && notifier.NeedsPasskey(req) {
		return v, "This rule asks approvers to sign with their passkey, which a link cannot carry: open the request in the Countersign inbox to approve it. Nothing was sent."
	}
	switch decision {
	case formRespond:
		v.Comment = strings.TrimSpace(form.Get("response"))
		if v.Comment == "" {
			return v, "Write the response to send to the agent."
		}
	case formAnswer:
		raw := bytes.TrimSpace([]byte(form.Get("answer")))
		if len(raw) == 0 {
			return v, "Write your answer (JSON) before sending it, or decline."
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return v, "Your answer is not valid JSON: " + err.Error() + ". Nothing was sent."
		}
		if dup, ok := errors.AsType[*contracts.DuplicateKeyError](contracts.CheckDuplicateKeys(raw)); ok {
			return v, fmt.Sprintf("Your answer gives the key %q twice; give each key once. Nothing was sent.", dup.Path)
		}
		v.Answer = &contracts.Answer{Action: contracts.AnswerAccept, Content: compact.Bytes()}
	case formDecline:
		v.Answer = &contracts.Answer{Action: contracts.AnswerDecline}
	}
	if len(v.Comment) > maxCommentBytes {
		return v, fmt.Sprintf("What you wrote is too long (%d bytes, at most %d).", len(v.Comment), maxCommentBytes)
	}
	if !human {
		h := form.Get("h")
		if a := form.Get("a"); h == "" && a != "" {
			var ok bool
			if h, ok = notifier.VersionHash(rec, a); !ok {
				return v, "The form is incomplete. Reload the page and answer again."
			}
		}
		if h == "" {
			return v, "The form is incomplete. Reload the page and answer again."
		}
		// A vote for arguments that changed would be refused: show the new
		// arguments instead.
		if current := currentHash(rec); current != "" && h != current {
			return v, staleNotice + " since you opened this page. Look at them again before you answer."
		}
		v.ArgumentsSHA256 = h
	}
	return v, ""
}

// result shows what the arbiter made of the vote.
func (p *pages) result(w http.ResponseWriter, r *http.Request, rec *contracts.Record, claims Claims, vote contracts.Vote, res notifier.VoteResult, log *slog.Logger) {
	after := rec
	if res.Record != nil {
		after = res.Record
	}
	view := p.requestPage(after, claims)
	switch {
	case res.InFlight:
		log.LogAttrs(r.Context(), slog.LevelInfo, "email vote in flight")
		view.NoticeKind, view.Notice = "info", "Your answer is being counted."
		view.Detail = "Reload this page in a moment to see the result."
		p.write(w, r, http.StatusAccepted, view)
	case res.Counted:
		log.LogAttrs(r.Context(), slog.LevelInfo, "email vote counted")
		view.NoticeKind, view.Notice = "ok", recordedNotice(vote)
		if after.Terminal() {
			view.Detail = notifier.OutcomeLine(after) + "."
		} else if vote.Decision == contracts.DecisionApprove {
			view.Notice += " " + notifier.Progress(&after.Request, after) + "."
		} else {
			view.Detail = "The request is still waiting for others: " + notifier.Progress(&after.Request, after) + "."
		}
		p.write(w, r, http.StatusOK, view)
	default:
		log.LogAttrs(r.Context(), slog.LevelInfo, "email vote refused", slog.String(logReason, res.Refused))
		view.NoticeKind = "error"
		view.Notice = "Your answer was not counted: " + contracts.Reason(res.Refused).Message() + "."
		view.Detail = oneLine(res.Detail)
		// A refused vote does not use the link up: while the request and
		// its approver can still answer, the form stays.
		if probe := (pageView{}); !p.closedNotice(&probe, after, claims) {
			view.Form = newForm(after, claims)
			if view.Detail != "" {
				view.Detail += " "
			}
			view.Detail += "This link can still answer."
		}
		p.write(w, r, contracts.Reason(res.Refused).HTTPStatus(), view)
	}
}

func recordedNotice(v contracts.Vote) string {
	switch v.Decision {
	case contracts.DecisionApprove:
		return "Your approval was recorded."
	case contracts.DecisionReject:
		return "Your rejection was recorded."
	case contracts.DecisionRespond:
		return "Your response was recorded."
	}
	if v.Answer != nil && v.Answer.Action == contracts.AnswerDecline {
		return "You declined to answer; this was recorded."
	}
	return "Your answer was recorded."
}

// write renders view with status and the headers every page carries. HEAD
// gets the headers only.
func (p *pages) write(w http.ResponseWriter, r *http.Request, status int, view pageView) {
	if view.Heading == "" {
		view.Heading = "Countersign"
	}
	var b bytes.Buffer
	if err := htmlTemplates.ExecuteTemplate(&b, "page.html", view); err != nil {
		p.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "email page: render failed", slog.String(logErr, err.Error()))
		b.Reset()
		b.WriteString("<!DOCTYPE html><title>Error</title><p>This page could not be shown.</p>")
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b.Bytes())
	}
}

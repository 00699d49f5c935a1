package inbox

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/services/api"
)

//go:embed web
var webFS embed.FS

// inboxPages are the inbox's templates by page; each is the layout with
// the page's content.
var inboxPages = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range []string{"login", "list", "detail", "message", "batch", "grants", "signedout", "passkeys", "devices", "offline"} {
		out[name] = template.Must(template.New(name).ParseFS(webFS, "web/layout.html", "web/"+name+".html"))
	}
	return out
}()

// Page is what every inbox page shows around its content.
type Page struct {
	Title string
	User  string
	CSRF  string
	Nav   string
	// Oversight: the person may see the oversight page (its nav link).
	Oversight bool
}

type loginPage struct {
	Page
	Next  string
	Error string
	// Provider names the OpenID Connect provider people may sign in with,
	// and StartURL begins that sign-in; empty without one.
	Provider string
	StartURL string
	// TokenForm shows the API token form.
	TokenForm bool
}

// signedOutPage continues a sign-out at the identity provider.
type signedOutPage struct {
	Page
	Provider string
	EndURL   string
}

type messagePage struct {
	Page
	Message string
}

// render executes a page in the layout.
func (in *Inbox) render(w http.ResponseWriter, status int, page string, data any) {
	in.renderTemplate(w, status, page, "layout", data)
}

func (in *Inbox) renderTemplate(w http.ResponseWriter, status int, page, name string, data any) {
	var b bytes.Buffer
	if err := inboxPages[page].ExecuteTemplate(&b, name, data); err != nil {
		in.log.Error("inbox template", "page", page, "template", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (in *Inbox) pageFor(sess *session, title, nav string) Page {
	if sess == nil { // a page for someone not signed in
		return Page{Title: title, Nav: nav}
	}
	return Page{Title: title, User: sess.p.Subject, CSRF: sess.csrf, Nav: nav, Oversight: sess.p.Has(api.OversightRoles...)}
}

func (in *Inbox) message(w http.ResponseWriter, status int, sess *session, msg string) {
	in.render(w, status, "message", messagePage{Page: in.pageFor(sess, "Countersign", ""), Message: msg})
}

// row is one request in a listing.
type row struct {
	EventID  string
	Summary  string
	Title    string
	Agent    string
	RunID    string
	Tool     string
	Risk     string
	Status   string
	Age      string
	Deadline string
	Progress string
	Outcome  string
	Mine     bool
	// ArgsSHA is the SHA-256 of the arguments under review, sent with a
	// batch's vote on the row.
	ArgsSHA string
}

type listPage struct {
	Page
	History bool
	Rows    []row
	Agents  []string
	Risks   []string
	Agent   string
	Risk    string
	Mine    bool
	Query   string
	Limited bool
	// RunID (and RunAgent) make the page a run's: its requests, and
	// MineCount of them the person may decide.
	RunID     string
	RunAgent  string
	MineCount int
	// Back is where a batch's answer page links back to.
	Back string
}

// Listing bounds: the pending list shows this many requests; history
// searches this many of the newest decided ones. recordWait is how long a
// page waits for a record that is about to be created (a link followed
// from a notification that overtook the arbiter).
const (
	recordWait       = 2 * time.Second
	inboxListLimit   = 200
	historyScanLimit = 2000
	historyShowLimit = 100
)

var risks = []string{contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical}

// ago says how long ago t was, for people: "just now", "5m ago", "3h ago".
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return roughDuration(d) + " ago"
}

// until says how far off t is: "in 50m", or "overdue".
func until(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d <= 0 {
		return "due now"
	}
	return "in " + roughDuration(d)
}

func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// hasVoted reports whether id has a counted vote on rec.
func hasVoted(rec *contracts.Record, id string) bool {
	return slices.ContainsFunc(rec.Votes, func(v contracts.Vote) bool { return v.Approver.ID == id })
}

// mayDecide says whether p may decide rec now, and if not, why (empty when
// the record is simply closed).
func mayDecide(rec *contracts.Record, p *api.Principal) (bool, string) {
	switch {
	case rec.Terminal():
		return false, ""
	case !p.Has(api.RoleApprover):
		return false, "You are signed in with a token that cannot vote (it lacks the approver role)."
	case !approval.IsApprover(rec, p.Subject):
		return false, "You are not an approver of this request."
	case hasVoted(rec, p.Subject):
		return false, "You have already voted on this request."
	case !rec.Request.Quorum.AllowSelfApproval && (rec.Request.Run.RequestedBy == p.Subject || rec.Request.Run.Owner == p.Subject):
		return false, "You requested this call (or own the run), and its rule does not allow approving your own request."
	}
	return true, ""
}

func toolName(req *contracts.ApprovalRequested) string {
	if req.ToolCall != nil {
		return req.ToolCall.Name
	}
	return ""
}

func (in *Inbox) row(rec *contracts.Record, p *api.Principal, now time.Time) row {
	req := &rec.Request
	ok, _ := mayDecide(rec, p)
	rw := row{
		EventID: req.EventID, Summary: req.Summary, Title: notifier.Title(req), Agent: req.Run.Agent, RunID: req.Run.ID,
		Tool: toolName(req), Risk: req.Risk, Status: rec.Status, Age: ago(now, req.CreatedAt), Mine: ok,
		Progress: notifier.Progress(req, rec),
	}
	_, rw.ArgsSHA = currentArguments(rec)
	if rw.Summary == "" {
		rw.Summary = rw.Title
	}
	if rec.Terminal() {
		rw.Outcome = notifier.OutcomeLine(rec)
		if rec.Outcome != nil {
			rw.Age = ago(now, rec.Outcome.DecidedAt)
		}
	} else {
		rw.Deadline = until(now, rec.ExpiresAt)
	}
	return rw
}

// getList serves GET /: pending requests, newest first, with filters
// agent, risk and mine; ?fragment=rows answers the rows alone.
func (in *Inbox) getList(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	pg := listPage{Page: in.pageFor(sess, "Inbox", "inbox"), Risks: risks,
		Agent: q.Get("agent"), Risk: q.Get("risk"), Mine: q.Get("mine") != "", Back: r.URL.RequestURI()}
	recs, aerr := in.api.Records(r.Context(), sess.p, api.Query{Statuses: []string{contracts.StatusPending}, Limit: inboxListLimit})
	if aerr != nil {
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	pg.Limited = len(recs) == inboxListLimit
	now := in.now()
	for _, rec := range recs {
		if !slices.Contains(pg.Agents, rec.Request.Run.Agent) {
			pg.Agents = append(pg.Agents, rec.Request.Run.Agent)
		}
		if pg.Agent != "" && rec.Request.Run.Agent != pg.Agent || pg.Risk != "" && rec.Request.Risk != pg.Risk {
			continue
		}
		rw := in.row(rec, &sess.p, now)
		if pg.Mine && !rw.Mine {
			continue
		}
		pg.Rows = append(pg.Rows, rw)
	}
	slices.Sort(pg.Agents)
	if pg.Agent != "" && !slices.Contains(pg.Agents, pg.Agent) {
		pg.Agents = append(pg.Agents, pg.Agent)
	}
	if q.Get("fragment") == "rows" {
		in.renderTemplate(w, http.StatusOK, "list", "rows", pg)
		return
	}
	in.render(w, http.StatusOK, "list", pg)
}

// getHistory serves GET /history?q=: decided, expired and cancelled
// requests, newest first, searched in summary, agent, tool and event id.
func (in *Inbox) getHistory(w http.ResponseWriter, r *http.Request, sess *session) {
	pg := listPage{Page: in.pageFor(sess, "History", "history"), History: true, Query: strings.TrimSpace(r.URL.Query().Get("q"))}
	var terminal []string
	for _, st := range contracts.Statuses() {
		if st.Terminal() {
			terminal = append(terminal, string(st))
		}
	}
	limit := historyScanLimit // a search looks through this many of the newest
	if pg.Query == "" {
		limit = historyShowLimit + 1
	}
	recs, aerr := in.api.Records(r.Context(), sess.p, api.Query{Statuses: terminal, Limit: limit})
	if aerr != nil {
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	needle := strings.ToLower(pg.Query)
	now := in.now()
	for _, rec := range recs {
		req := &rec.Request
		hay := strings.ToLower(strings.Join([]string{req.Summary, req.Run.Agent, toolName(req), req.EventID}, "\n"))
		if needle != "" && !strings.Contains(hay, needle) {
			continue
		}
		if len(pg.Rows) == historyShowLimit {
			pg.Limited = true
			break
		}
		pg.Rows = append(pg.Rows, in.row(rec, &sess.p, now))
	}
	in.render(w, http.StatusOK, "list", pg)
}

type timelineItem struct {
	At   moment
	Text string
}

// detailPage is the page of one request.
type detailPage struct {
	Page
	EventID       string
	Heading       string
	Summary       string
	Kind          string
	Agent         string
	RunID         string
	RequestedBy   string
	Owner         string
	Tenant        string
	Tool          string
	Risk          string
	Rule          string
	PolicyVersion string
	PolicyError   string
	Created       moment
	Arguments     string
	Fields        []argField
	// Edited are the arguments an approver's edit put in place of the
	// requested ones (Changes: what differs), when there was an edit.
	Edited   *editedView
	Question string
	Status   statusView
}

// editedView is what an edit changed in a request's arguments, and who.
type editedView struct {
	By        string
	Comment   string
	Arguments string
	Fields    []argField
	Changes   []argChange
}

// statusView is the part of the detail page that changes: status, quorum
// progress, the timeline and the decision forms. It is also served alone
// (?fragment=status) for the page to swap in.
type statusView struct {
	EventID   string
	CSRF      string
	Status    string
	Terminal  bool
	Outcome   string
	Progress  string
	Deadline  moment
	Approvers string
	// Heading says what the request is, or how it was decided; the page's
	// title and heading follow it as it changes.
	Heading    string
	Timeline   []timelineItem
	CanDecide  bool
	ReadOnly   string
	Allowed    map[string]bool
	HumanInput bool
	ArgsSHA    string
	EditArgs   string
	// EditUnchecked: the request carries no tool schema, so an edit is
	// checked for being a JSON object and nothing more.
	EditUnchecked bool
	Result        string
	ResultError   string
	ResultCode    string
	ArgsError     string
	Comment       string
	Answer        string
	// GrantScopes are the grants the request's rule lets an approval ask
	// for beyond the call, GrantMaxTTL the longest, and GrantCondition
	// whether a condition may widen the arguments.
	GrantScopes    []grantOption
	GrantMaxTTL    string
	GrantTTL       string // what the form proposes: an hour, or less when the rule allows less
	GrantCondition bool
	// StepUp, when the request's rule says step_up: passkey, is what the
	// approve and edit forms say about signing with a passkey.
	StepUp *stepUpView
	// Review is the automated first reviewer's opinion (nil: none).
	Review *reviewView
	// Execution says what became of a claimed call: its claimant's report,
	// or that none came ("" before a claim).
	Execution      string
	ExecutionState string // succeeded, failed or unreported
}

// grantOption is a grant scope the approve form offers.
type grantOption struct {
	Value, Label string
}

// grantOptions are the scopes beyond the call that req's rule permits.
func grantOptions(req *contracts.ApprovalRequested) []grantOption {
	if req.Grants == nil || req.Kind == contracts.KindHumanInput {
		return nil
	}
	var out []grantOption
	for _, sc := range req.Grants.Scopes {
		switch {
		case sc == contracts.GrantScopeRun && req.Run.ID != "":
			out = append(out, grantOption{sc, "also " + toolName(req) + " for the rest of run " + req.Run.ID})
		case sc == contracts.GrantScopeAgent:
			out = append(out, grantOption{sc, "also " + toolName(req) + " for agent " + req.Run.Agent + " in any run"})
		}
	}
	return out
}

// currentArguments are the arguments under review now: the newest counted
// edit's, else the request's.
func currentArguments(rec *contracts.Record) (json.RawMessage, string) {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		v := rec.Votes[i]
		if v.Decision == contracts.DecisionEdit && len(v.Arguments) > 0 {
			sha, _ := contracts.ArgumentsSHA256(v.Arguments)
			return v.Arguments, sha
		}
	}
	if rec.Request.ToolCall == nil {
		return nil, ""
	}
	return rec.Request.ToolCall.Arguments, rec.Request.ToolCall.ArgumentsSHA256
}

func (in *Inbox) detail(ctx context.Context, rec *contracts.Record, sess *session) detailPage {
	req := &rec.Request
	pg := detailPage{
		Page: in.pageFor(sess, heading(rec), ""), EventID: req.EventID, Heading: heading(rec), Summary: req.Summary,
		Kind: req.Kind, Agent: req.Run.Agent, RunID: req.Run.ID, RequestedBy: req.Run.RequestedBy, Owner: req.Run.Owner,
		Tenant: req.Run.Tenant, Tool: toolName(req), Risk: req.Risk, Rule: req.Policy.Rule, PolicyVersion: req.Policy.Version,
		PolicyError: req.Policy.Error, Created: momentAgo(in.now(), req.CreatedAt),
	}
	if req.ToolCall != nil {
		pg.Arguments = notifier.FormatJSON(req.ToolCall.Arguments, 0)
		pg.Fields = argumentFields(req.ToolCall.Arguments)
		pg.Edited = editedOf(rec)
	}
	if req.Question != nil {
		pg.Question = req.Question.Text
	}
	pg.Status = in.status(ctx, rec, sess)
	return pg
}

// heading says what a request asks ("Approval needed: billing.refund")
// while it is pending, and how it ended once decided ("Approved:
// billing.refund", "Expired: deploy.release").
func heading(rec *contracts.Record) string {
	req := &rec.Request
	if !rec.Terminal() {
		return notifier.Title(req)
	}
	what := rec.Status
	if what != "" {
		what = strings.ToUpper(what[:1]) + what[1:]
	}
	switch {
	case req.Kind == contracts.KindHumanInput:
		return what + ": input from a person for " + req.Run.Agent
	case req.ToolCall != nil:
		return what + ": " + req.ToolCall.Name
	}
	return what
}

// editedOf is what the newest counted edit of rec changed, or nil.
func editedOf(rec *contracts.Record) *editedView {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		v := rec.Votes[i]
		if v.Decision != contracts.DecisionEdit || len(v.Arguments) == 0 {
			continue
		}
		return &editedView{By: v.Approver.ID + " via " + v.Approver.Via, Comment: v.Comment,
			Arguments: notifier.FormatJSON(v.Arguments, 0), Fields: argumentFields(v.Arguments),
			Changes: argumentChanges(rec.Request.ToolCall.Arguments, v.Arguments)}
	}
	return nil
}

func (in *Inbox) status(ctx context.Context, rec *contracts.Record, sess *session) statusView {
	req := &rec.Request
	now := in.now()
	sv := statusView{
		EventID: req.EventID, CSRF: sess.csrf, Status: rec.Status, Terminal: rec.Terminal(),
		Progress: notifier.Progress(req, rec), HumanInput: req.Kind == contracts.KindHumanInput,
		Allowed: map[string]bool{}, Heading: heading(rec), EditUnchecked: len(req.ToolSchema) == 0,
	}
	if rec.Terminal() {
		sv.Outcome = notifier.OutcomeLine(rec)
	} else {
		sv.Deadline = momentUntil(now, rec.ExpiresAt)
	}
	approvers := slices.Clone(req.Quorum.Approvers)
	for i, tier := range req.Escalation {
		if i < rec.EscalationLevel {
			approvers = append(approvers, tier.Approvers...)
		}
	}
	if len(approvers) == 0 {
		sv.Approvers = "any approver"
	} else {
		sv.Approvers = strings.Join(approvers, ", ")
	}
	for _, d := range req.AllowedDecisions {
		sv.Allowed[d] = true
	}
	if len(req.AllowedDecisions) == 0 {
		sv.Allowed[contracts.DecisionApprove], sv.Allowed[contracts.DecisionReject] = true, true
	}
	sv.CanDecide, sv.ReadOnly = mayDecide(rec, &sess.p)
	if sv.GrantScopes = grantOptions(req); sv.GrantScopes != nil {
		sv.GrantMaxTTL, sv.GrantTTL = grantTTLs(req.Grants.MaxTTL)
		sv.GrantCondition = req.Grants.Arguments == contracts.GrantArgumentsCondition
	}
	args, sha := currentArguments(rec)
	sv.ArgsSHA = sha
	if len(args) > 0 {
		sv.EditArgs = notifier.FormatJSON(args, 0)
	}
	sv.StepUp = in.stepUp(ctx, rec, sess)
	sv.Timeline = in.timeline(ctx, rec, sess)
	sv.Review = reviewOf(rec)
	sv.Execution, sv.ExecutionState = executionOf(rec)
	return sv
}

// executionOf tells what became of a claimed call: the claimant's report of
// how it ended, or that the claimant never reported (it may have died
// after its claim; the call may or may not have run).
func executionOf(rec *contracts.Record) (text, state string) {
	c := rec.Claim
	if c == nil {
		return "", ""
	}
	x := rec.Execution
	if x == nil {
		return fmt.Sprintf("Claimed by %s at %s; no outcome reported: the call may or may not have run.",
			orDash(c.By), c.At.UTC().Format(time.RFC3339)), "unreported"
	}
	text = fmt.Sprintf("Claimed by %s; %s reported it %s at %s", orDash(c.By), x.ReportedBy, x.Status, x.ReportedAt.UTC().Format(time.RFC3339))
	if x.Summary != "" {
		text += ": " + x.Summary
	}
	return text + ".", x.Status
}

// timeline tells an approval's story for people, from the same events as
// GET /v1/approvals/{event_id}/events.
func (in *Inbox) timeline(ctx context.Context, rec *contracts.Record, sess *session) []timelineItem {
	req := &rec.Request
	at := momentOf
	items := []timelineItem{{At: at(req.CreatedAt), Text: fmt.Sprintf("Requested by %s (run %s)", req.Run.Agent, orDash(req.Run.ID))}}
	evs, err := in.api.Timeline(ctx, sess.p, req.EventID)
	if err != nil {
		in.log.Warn("inbox timeline", "event_id", req.EventID, "err", err)
		return append(items, timelineItem{Text: "The rest of the timeline could not be read."})
	}
	votes := map[string]contracts.Vote{}
	for _, v := range rec.Votes {
		votes[v.VoteID] = v
	}
	for _, ev := range evs {
		var text string
		switch ev.Kind {
		case api.KindNotify:
			var rc contracts.NotifyReceipt
			if json.Unmarshal(ev.Data, &rc) != nil {
				continue
			}
			what := "Notified"
			switch {
			case strings.HasPrefix(rc.Kind, "reminder."):
				what = "Reminder " + strings.TrimPrefix(rc.Kind, "reminder.") + " sent"
			case strings.HasPrefix(rc.Kind, "escalation."):
				what = "Escalation " + strings.TrimPrefix(rc.Kind, "escalation.") + " sent"
			case rc.Kind == "decided":
				what = "Outcome posted"
			}
			text = fmt.Sprintf("%s via %s to %s", what, rc.Channel, rc.Target)
			if rc.Status == contracts.ReceiptFailed {
				text = fmt.Sprintf("%s via %s to %s failed: %s", what, rc.Channel, rc.Target, rc.Error)
			}
		case api.KindChanged:
			var ch contracts.Changed
			if json.Unmarshal(ev.Data, &ch) != nil {
				continue
			}
			text = changeText(ch, votes)
		case api.KindRead:
			var rd contracts.Read
			if json.Unmarshal(ev.Data, &rd) != nil {
				continue
			}
			what := "Opened"
			if rd.What == contracts.ReadExport {
				what = "Audit trail exported"
			}
			text = fmt.Sprintf("%s by %s via %s", what, rd.Reader, rd.Surface)
		case api.KindDecided:
			var d contracts.Decided
			if json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			text = "Decided: " + d.Status
			if rec.Terminal() {
				text = notifier.OutcomeLine(rec)
			}
		}
		if text != "" {
			items = append(items, timelineItem{At: at(ev.At), Text: text})
		}
	}
	return items
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func changeText(ch contracts.Changed, votes map[string]contracts.Vote) string {
	who := ch.By
	if ch.Approver != nil {
		who = ch.Approver.ID + " via " + ch.Approver.Via
	}
	switch ch.Change {
	case contracts.ChangeVoteCounted:
		v, ok := votes[ch.VoteID]
		if !ok {
			return "Vote by " + who + " counted"
		}
		s := fmt.Sprintf("%s: %s", who, v.Decision)
		if v.Comment != "" {
			s += ": " + v.Comment
		}
		return s
	case contracts.ChangeVoteRefused:
		return fmt.Sprintf("Vote by %s refused: %s", who, contracts.Reason(ch.Reason).Message())
	case contracts.ChangeReminded:
		return fmt.Sprintf("Reminder %d due", ch.Step)
	case contracts.ChangeEscalated:
		return fmt.Sprintf("Escalated to level %d", ch.Step)
	case contracts.ChangeExtended:
		return "Deadline extended by " + orDash(who)
	case contracts.ChangeClaimed:
		return "Claimed by " + orDash(who) + ": the call may now run, once"
	case contracts.ChangeOutcome:
		return "Outcome reported by " + orDash(who)
	case contracts.ChangeOutcomeRefused:
		return "An outcome report by " + orDash(who) + " was refused: " + contracts.Reason(ch.Reason).Message()
	case contracts.ChangeClaimRefused:
		return "A second claim was refused"
	case contracts.ChangeOpinion:
		if ch.Reason != "" {
			return "Automated review by " + orDash(who) + " gave no opinion (" + ch.Reason + "); left to people"
		}
		return "Automated review by " + orDash(who)
	case contracts.ChangeCancelRefused, contracts.ChangeExtendRefused:
		return fmt.Sprintf("%s by %s refused (%s)", strings.TrimSuffix(ch.Change, "_refused"), orDash(who), ch.Reason)
	}
	return ""
}

// getDetail serves GET /approvals/{event_id}; ?fragment=status answers
// the changing part alone.
func (in *Inbox) getDetail(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("event_id")
	if !contracts.ValidEventID(id) {
		in.message(w, http.StatusNotFound, sess, "There is no such approval.")
		return
	}
	rec, aerr := in.api.Record(r.Context(), sess.p, id, recordWait)
	if aerr != nil {
		if aerr.Code == api.CodeUnknownEvent {
			in.message(w, http.StatusNotFound, sess, "There is no approval "+id+".")
			return
		}
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	if r.URL.Query().Get("fragment") == "status" {
		in.renderTemplate(w, http.StatusOK, "detail", "status", in.status(r.Context(), rec, sess))
		return
	}
	in.api.RecordOpened(r.Context(), sess.p, rec)
	pg := in.detail(r.Context(), rec, sess)
	pg.Status.Result = takeFlash(w, r, rec)
	in.render(w, http.StatusOK, "detail", pg)
}

// grantTTLs are the longest a grant may last (maxTTL, as the request
// carries it) and what the form proposes, both as people write them (8h,
// 1h30m, not 8h0m0s): an hour, or the longest when that is less. A value
// that does not parse is shown as it is.
func grantTTLs(maxTTL string) (longest, proposed string) {
	d, err := time.ParseDuration(maxTTL)
	if err != nil || d <= 0 {
		return maxTTL, maxTTL
	}
	return contracts.ShortDuration(d), contracts.ShortDuration(min(d, time.Hour))
}

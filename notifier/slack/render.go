package slack

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	slackgo "github.com/slack-go/slack"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Action ids of the buttons on a request message. The modals opened by
// Edit…, Respond… and Answer… use the same ids as callback ids.
const (
	ActionApprove = "countersign_approve"
	ActionReject  = "countersign_reject"
	ActionEdit    = "countersign_edit"
	ActionRespond = "countersign_respond"
	ActionAnswer  = "countersign_answer"
	ActionDecline = "countersign_decline"
	// ActionApproveRun approves every pending call of the request's run
	// that the clicker may decide ("Approve all of run …").
	ActionApproveRun = "countersign_approve_run"
	// ActionOpen is the "Open in Countersign" link button. Slack reports
	// its clicks too; they are ignored.
	ActionOpen = "countersign_open"
)

// Slack's Block Kit limits that rendering keeps to. They count characters;
// rendering counts bytes, which are never fewer, so a cut text fits however
// Slack counts.
const (
	maxHeaderText  = 150
	maxSectionText = 3000
	maxFieldText   = 2000
	maxButtonValue = 2000
	maxButtonURL   = 3000
	maxConfirmText = 300
	maxContextText = 3000
	// maxFallbackText bounds a message's notification text (Slack allows
	// 40,000 characters; a notification shows far fewer).
	maxFallbackText = 3000
	// maxFactText bounds one value in the facts section.
	maxFactText = 300
)

// RenderOptions say how a message is rendered.
type RenderOptions struct {
	// PublicURL is the base URL of the Countersign web inbox; when set,
	// messages link to the approval's page (notifier.ApprovalURL).
	PublicURL string
	// Reminder marks a reminder of a pending request ("Reminder: " in the
	// header).
	Reminder bool
	// RunResults, when set, are shown under the request: what an "Approve
	// all of run" click on this message made of each approval.
	RunResults *RunResults
}

// RunResults are the results of an "Approve all of run" click: who clicked,
// the run, and what came of each vote.
type RunResults struct {
	By       string
	RunID    string
	Decision notifier.RunDecision
}

// Message is a rendered Slack message: the notification text and the blocks.
type Message struct {
	// Text is the fallback shown in notifications, escaped for mrkdwn.
	Text string
	// Blocks are what Slack shows. Every block has a block_id that changes
	// whenever the message's content does.
	Blocks []slackgo.Block
}

// ButtonValue is the value of every Countersign button: the approval and
// which arguments the message showed, so that a vote counts only for them.
// Arguments with no sensitive value are named by their hash; arguments with
// masked values by their version (Version: "0" the request's, "n" those of
// its n-th edit), since a plain hash beside masked values would let anyone
// who sees the message confirm a guess of them. The handler of the click
// looks the version's hash up in the record. It identifies nothing about the
// voter, who is the signed Slack user of the click.
type ButtonValue struct {
	EventID         string `json:"e"`
	ArgumentsSHA256 string `json:"h,omitempty"`
	Version         string `json:"a,omitempty"`
}

// ParseButtonValue decodes a button's value.
func ParseButtonValue(s string) (ButtonValue, error) {
	var v ButtonValue
	if err := contracts.Decode([]byte(s), &v); err != nil {
		return ButtonValue{}, fmt.Errorf("slack: button value: %w", err)
	}
	if v.EventID == "" {
		return ButtonValue{}, fmt.Errorf("slack: button value: no approval id")
	}
	return v, nil
}

// RequestMessage renders a pending request: what is asked, its facts, the
// tool call's current arguments (or the question), and the buttons its
// allowed decisions permit. rec, when not nil, is the request's current
// record: its progress is shown and, after an edit, the edited arguments.
// A terminal rec renders OutcomeMessage(rec, opts).
func RequestMessage(req *contracts.ApprovalRequested, rec *contracts.Record, opts RenderOptions) Message {
	if rec != nil && rec.Terminal() {
		return OutcomeMessage(rec, opts)
	}
	if rec != nil {
		r := notifier.ForRecord(rec) // values its edits added are masked too
		req = &r
	}
	title := notifier.Title(req)
	if opts.Reminder {
		title = "Reminder: " + title
	}
	var b builder
	b.add("head", slackgo.NewHeaderBlock(plain(cutPlain(title, maxHeaderText))))
	if req.Summary != "" {
		b.add("summary", slackgo.NewSectionBlock(mrkdwn(escapeCut(req.Summary, maxSectionText)), nil, nil))
	}
	b.add("facts", slackgo.NewSectionBlock(nil, facts(req, rec), nil))
	args, sha, editor := currentArguments(req, rec)
	version := notifier.ArgumentsVersion(rec)
	if req.Kind == contracts.KindHumanInput {
		if req.Question != nil {
			b.add("question", slackgo.NewSectionBlock(mrkdwn(questionText(req.Question)), nil, nil))
		}
	} else if req.ToolCall != nil {
		heading := "*Arguments*"
		if editor != "" {
			heading = "*Arguments* (edited by " + escapeCut(editor, maxFactText) + ")"
		}
		heading += sensitiveHeading(req)
		b.add("args", slackgo.NewSectionBlock(mrkdwn(codeText(heading, jsonFormat(notifier.ShownArguments(req, args)))), nil, nil))
	}
	if opts.RunResults != nil {
		b.add("run", slackgo.NewSectionBlock(mrkdwn(runResultsText(opts.RunResults)), nil, nil))
	}
	b.add("context", slackgo.NewContextBlock("", mrkdwn(contextText(req, opts, false))))
	if buttons := requestButtons(req, sha, version, opts); len(buttons) > 0 {
		b.add("actions", slackgo.NewActionBlock("", buttons...))
	}
	text := title
	if req.Summary != "" {
		text += ": " + req.Summary
	}
	return b.message(req.EventID, escapeCut(text, maxFallbackText))
}

// OutcomeMessage renders a decided request: the outcome line
// (notifier.OutcomeLine) with an emoji for the status, the request's facts
// and arguments (the edited ones, for an approval with edits) or question
// and answer, and no buttons.
func OutcomeMessage(rec *contracts.Record, opts RenderOptions) Message {
	r := notifier.ForRecord(rec) // values its edits added are masked too
	req := &r
	emoji := statusEmoji(rec)
	line := notifier.OutcomeLine(rec)
	var b builder
	b.add("head", slackgo.NewHeaderBlock(plain(cutPlain(emoji+" "+outcomeTitle(rec), maxHeaderText))))
	b.add("outcome", slackgo.NewSectionBlock(mrkdwn(emoji+" "+escapeCut(line, maxSectionText-len(emoji)-1)), nil, nil))
	if req.Summary != "" {
		b.add("summary", slackgo.NewSectionBlock(mrkdwn(escapeCut(req.Summary, maxSectionText)), nil, nil))
	}
	b.add("facts", slackgo.NewSectionBlock(nil, facts(req, rec), nil))
	o := rec.Outcome
	if req.Kind == contracts.KindHumanInput {
		if req.Question != nil {
			b.add("question", slackgo.NewSectionBlock(mrkdwn(questionText(req.Question)), nil, nil))
		}
		if rec.Status == contracts.StatusAnswered && o != nil && len(o.Arguments) > 0 &&
			(o.Action == "" || o.Action == contracts.AnswerAccept) {
			b.add("answer", slackgo.NewSectionBlock(mrkdwn(codeText("*Answer*", jsonFormat(o.Arguments))), nil, nil))
		}
	} else if req.ToolCall != nil {
		heading, args := "*Arguments*", req.ToolCall.Arguments
		if o != nil && o.Decision == contracts.DecisionEdit && len(o.Arguments) > 0 {
			heading, args = "*Arguments* (edited)", o.Arguments
		}
		heading += sensitiveHeading(req)
		b.add("args", slackgo.NewSectionBlock(mrkdwn(codeText(heading, jsonFormat(notifier.ShownArguments(req, args)))), nil, nil))
	}
	if opts.RunResults != nil {
		b.add("run", slackgo.NewSectionBlock(mrkdwn(runResultsText(opts.RunResults)), nil, nil))
	}
	b.add("context", slackgo.NewContextBlock("", mrkdwn(contextText(req, opts, true))))
	return b.message(req.EventID, escapeCut(emoji+" "+line+": "+notifier.Title(req), maxFallbackText))
}

// builder collects named blocks; message gives them their block ids.
type builder struct {
	names  []string
	blocks []slackgo.Block
}

func (b *builder) add(name string, block slackgo.Block) {
	b.names = append(b.names, name)
	b.blocks = append(b.blocks, block)
}

// message assigns block ids "cs-<approval>-<version>-<name>": <approval>
// is a hash of the event id and <version> a hash of the message's content,
// so ids are unique within a message and new whenever an update changes
// what it shows, as Slack asks of updated messages.
func (b *builder) message(eventID, text string) Message {
	content, err := json.Marshal(struct {
		T string          `json:"t"`
		B []slackgo.Block `json:"b"`
	}{text, b.blocks})
	if err != nil {
		// Block Kit types always encode; a hash of the text still
		// distinguishes versions.
		content = []byte(text)
	}
	prefix := "cs-" + shortHash(eventID) + "-" + shortHash(string(content)) + "-"
	for i, block := range b.blocks {
		setBlockID(block, prefix+b.names[i])
	}
	return Message{Text: text, Blocks: b.blocks}
}

func setBlockID(block slackgo.Block, id string) {
	switch v := block.(type) {
	case *slackgo.HeaderBlock:
		v.BlockID = id
	case *slackgo.SectionBlock:
		v.BlockID = id
	case *slackgo.ContextBlock:
		v.BlockID = id
	case *slackgo.ActionBlock:
		v.BlockID = id
	case *slackgo.InputBlock:
		v.BlockID = id
	case *slackgo.DividerBlock:
		v.BlockID = id
	}
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// facts are the request's key facts as section fields.
func facts(req *contracts.ApprovalRequested, rec *contracts.Record) []*slackgo.TextBlockObject {
	f := []*slackgo.TextBlockObject{field("Agent", escapeOr(req.Run.Agent))}
	if req.ToolCall != nil && req.Kind != contracts.KindHumanInput {
		f = append(f, field("Tool", escapeOr(req.ToolCall.Name)))
	}
	f = append(f, field("Run", escapeOr(req.Run.ID)))
	if req.Run.RequestedBy != "" {
		f = append(f, field("Requested by", escapeOr(req.Run.RequestedBy)))
	}
	f = append(f, field("Risk", riskEmoji(req.Risk)+" "+escapeOr(req.Risk)))
	f = append(f, field("Expires", slackDate(req.ExpiresAt)))
	if req.Kind != contracts.KindHumanInput {
		f = append(f, field("Quorum", escapeOr(notifier.Progress(req, rec))))
	}
	if req.Policy.Rule != "" {
		rule := escapeCut(req.Policy.Rule, maxFactText)
		if req.Policy.Version != "" {
			rule += " (version " + escapeCut(req.Policy.Version, maxFactText) + ")"
		}
		f = append(f, field("Rule", rule))
	}
	return f
}

// field is one fact: a bold label over an escaped value.
func field(label, value string) *slackgo.TextBlockObject {
	return mrkdwn(cutEscaped("*"+label+"*\n"+value, maxFieldText))
}

// escapeOr escapes s cut to a fact's length, or gives a dash for nothing.
func escapeOr(s string) string {
	if s == "" {
		return "—"
	}
	return escapeCut(s, maxFactText)
}

// slackDate shows t in each reader's time zone, with the UTC time in RFC
// 3339 for clients that cannot.
func slackDate(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

func riskEmoji(risk string) string {
	switch risk {
	case contracts.RiskLow:
		return ":large_green_circle:"
	case contracts.RiskMedium:
		return ":large_yellow_circle:"
	case contracts.RiskHigh:
		return ":large_orange_circle:"
	case contracts.RiskCritical:
		return ":red_circle:"
	default:
		return ":white_circle:"
	}
}

// statusEmoji marks an outcome: ✅ approved or answered, ❌ rejected or
// declined, ⌛ expired.
func statusEmoji(rec *contracts.Record) string {
	switch rec.Status {
	case contracts.StatusApproved:
		return "✅"
	case contracts.StatusRejected:
		return "❌"
	case contracts.StatusExpired:
		return "⌛"
	case contracts.StatusCancelled:
		return "🚫"
	case contracts.StatusResponded:
		return "💬"
	case contracts.StatusAnswered:
		if o := rec.Outcome; o != nil && o.Action != "" && o.Action != contracts.AnswerAccept {
			return "❌"
		}
		return "✅"
	default:
		return "⏳"
	}
}

// outcomeTitle is the header of a decided request: "Approved: send_payment".
func outcomeTitle(rec *contracts.Record) string {
	status := rec.Status
	if status != "" {
		status = strings.ToUpper(status[:1]) + status[1:]
	}
	req := &rec.Request
	switch {
	case req.Kind == contracts.KindHumanInput:
		return status + ": question from " + req.Run.Agent
	case req.ToolCall != nil:
		return status + ": " + req.ToolCall.Name
	default:
		return status
	}
}

// contextText is the small print: the approval id and, on a decided
// message, the link to it (a pending one has a link button instead), and a
// policy condition error when one gated the call.
func contextText(req *contracts.ApprovalRequested, opts RenderOptions, link bool) string {
	s := "Approval " + escapeCut(req.EventID, 200)
	if link {
		if u := notifier.ApprovalURL(opts.PublicURL, req.EventID); u != "" && !strings.ContainsAny(u, "|<>") && len(u) <= maxButtonURL {
			s += " · <" + escape(u) + "|Open in Countersign>"
		}
	}
	if req.Policy.Error != "" {
		s += " · policy condition error: " + escapeCut(req.Policy.Error, 1000)
	}
	if !link && notifier.NeedsPasskey(req) {
		s += " · :closed_lock_with_key: " + escape(notifier.PasskeyNote)
	}
	return cutEscaped(s, maxContextText)
}

// currentArguments are the arguments under review in rec (the newest
// edit's, else the request's), their hash, and who edited them.
func currentArguments(req *contracts.ApprovalRequested, rec *contracts.Record) (args json.RawMessage, sha, editor string) {
	if req.ToolCall == nil {
		return nil, "", ""
	}
	if rec != nil {
		for i := len(rec.Votes) - 1; i >= 0; i-- {
			v := rec.Votes[i]
			if v.Decision == contracts.DecisionEdit {
				sha, _ := contracts.ArgumentsSHA256(v.Arguments)
				return v.Arguments, sha, v.Approver.ID
			}
		}
	}
	return req.ToolCall.Arguments, req.ToolCall.ArgumentsSHA256, ""
}

// allows reports whether the request shows the button for decision d. An
// empty allowed_decisions shows the basic decisions of the kind: approve and
// reject for a tool call, answer for a question.
func allows(req *contracts.ApprovalRequested, d string) bool {
	if len(req.AllowedDecisions) == 0 {
		if req.Kind == contracts.KindHumanInput {
			return d == contracts.DecisionAnswer
		}
		return d == contracts.DecisionApprove || d == contracts.DecisionReject
	}
	for _, a := range req.AllowedDecisions {
		if a == d {
			return true
		}
	}
	return false
}

// requestButtons are the buttons of a pending request.
// A request whose approvals need a passkey (notifier.NeedsPasskey) has no
// Approve, Edit or run button: its link to the inbox says to sign there.
func requestButtons(req *contracts.ApprovalRequested, sha, version string, opts RenderOptions) []slackgo.BlockElement {
	var els []slackgo.BlockElement
	stepUp := notifier.NeedsPasskey(req)
	bv := ButtonValue{EventID: req.EventID}
	switch {
	case req.Kind == contracts.KindHumanInput:
	case len(req.Sensitive) > 0:
		bv.Version = version
	default:
		bv.ArgumentsSHA256 = sha
	}
	raw, err := json.Marshal(bv)
	if value := string(raw); err == nil && len(value) <= maxButtonValue {
		button := func(id, text string) *slackgo.ButtonBlockElement {
			return slackgo.NewButtonBlockElement(id, value, plain(text))
		}
		if req.Kind == contracts.KindHumanInput {
			if allows(req, contracts.DecisionAnswer) {
				els = append(els,
					button(ActionAnswer, "Answer…").WithStyle(slackgo.StylePrimary),
					button(ActionDecline, "Decline"))
			}
		} else {
			if allows(req, contracts.DecisionApprove) && !stepUp {
				approve := button(ActionApprove, "Approve").WithStyle(slackgo.StylePrimary)
				if req.Risk == contracts.RiskHigh || req.Risk == contracts.RiskCritical {
					approve.WithConfirm(approveConfirm(req))
				}
				els = append(els, approve)
			}
			if allows(req, contracts.DecisionReject) {
				els = append(els, button(ActionReject, "Reject").WithStyle(slackgo.StyleDanger))
			}
			if allows(req, contracts.DecisionEdit) && req.ToolCall != nil && !stepUp {
				els = append(els, button(ActionEdit, "Edit…"))
			}
			if allows(req, contracts.DecisionRespond) {
				els = append(els, button(ActionRespond, "Respond…"))
			}
			if runButton(req) {
				els = append(els, button(ActionApproveRun, "Approve all of this run").
					WithConfirm(approveRunConfirm()))
			}
		}
	}
	if u := notifier.ApprovalURL(opts.PublicURL, req.EventID); u != "" && len(u) <= maxButtonURL {
		if stepUp {
			// Approving is signing, which only the inbox can do: its
			// link comes first, where Approve would be.
			open := slackgo.NewButtonBlockElement(ActionOpen, "", plain(notifier.SignInInbox)).WithURL(u).WithStyle(slackgo.StylePrimary)
			els = append([]slackgo.BlockElement{open}, els...)
		} else {
			els = append(els, slackgo.NewButtonBlockElement(ActionOpen, "", plain("Open in Countersign")).WithURL(u))
		}
	}
	return els
}

// runButton reports whether a request's message carries "Approve all of
// run …": a tool call of a run, which its rule lets be approved.
func runButton(req *contracts.ApprovalRequested) bool {
	return req.Kind != contracts.KindHumanInput && req.Run.ID != "" && allows(req, contracts.DecisionApprove) && !notifier.NeedsPasskey(req)
}

// approveRunConfirm is the dialog before approving a whole run: the click
// decides calls this message does not show.
func approveRunConfirm() *slackgo.ConfirmationBlockObject {
	// The run's id is in the message's facts; nothing of the request goes
	// in plain text.
	const text = "Approve every pending call of this run (its Run, by its Agent) that you may decide, not only this one? " +
		"Each is decided on its own with its rules; this message will then list what became of each."
	return slackgo.NewConfirmationBlockObject(
		plain("Approve the whole run?"),
		plain(text),
		plain("Approve all"),
		plain("Cancel")).WithStyle(slackgo.StylePrimary)
}

// maxRunLines bounds the approvals listed one by one in a run's results.
const maxRunLines = 20

// runResultsText says what an "Approve all of run" click made of each
// approval: a count line, then one line per approval (counted, refused with
// the reason's message, in flight), cut to a section's length.
func runResultsText(r *RunResults) string {
	counted, refused, inFlight := r.Decision.Counts()
	head := fmt.Sprintf("*%s approved all of run %s:* %d counted, %d refused, %d in flight",
		escapeCut(r.By, maxFactText), escapeCut(r.RunID, maxFactText), counted, refused, inFlight)
	if len(r.Decision.Votes) == 0 {
		head = fmt.Sprintf("*%s approved all of run %s:* nothing was pending that they may decide",
			escapeCut(r.By, maxFactText), escapeCut(r.RunID, maxFactText))
	}
	lines := []string{head}
	for i, v := range r.Decision.Votes {
		if i == maxRunLines {
			lines = append(lines, fmt.Sprintf("… and %d more", len(r.Decision.Votes)-i))
			break
		}
		lines = append(lines, runResultLine(v))
	}
	if r.Decision.Truncated {
		lines = append(lines, "The run has more pending calls than one click decides; click again for the rest.")
	}
	return cutEscaped(strings.Join(lines, "\n"), maxSectionText)
}

// runResultLine is one approval's result: "• ✅ send_payment (approval …): counted, approved".
func runResultLine(v notifier.RunVote) string {
	what, id := "a call", ""
	if v.Request != nil {
		id = v.Request.EventID
		if v.Request.ToolCall != nil {
			what = v.Request.ToolCall.Name
		}
	}
	name := "`" + escapeCut(breakFences(what), maxFactText) + "` (approval " + escapeCut(id, 100) + ")"
	switch {
	case v.Counted:
		s := "• ✅ " + name + ": counted"
		if v.Record != nil {
			if v.Record.Terminal() {
				s += ", " + escapeCut(v.Record.Status, maxFactText)
			} else {
				s += ", " + escapeCut(notifier.Progress(&v.Record.Request, v.Record), maxFactText)
			}
		}
		return s
	case v.InFlight:
		return "• ⏳ " + name + ": in flight, not yet counted"
	default:
		msg := v.Detail
		if msg == "" {
			msg = contracts.Reason(v.Refused).Message()
		}
		return "• ⛔ " + name + ": refused, " + escapeCut(msg, maxFactText)
	}
}

// approveConfirm is the dialog before approving a high or critical risk call.
func approveConfirm(req *contracts.ApprovalRequested) *slackgo.ConfirmationBlockObject {
	what := "this call"
	if req.ToolCall != nil {
		what = req.ToolCall.Name
	}
	text := fmt.Sprintf("The risk of %s is %s. Approving lets %s run it.", what, req.Risk, orDash(req.Run.Agent))
	c := slackgo.NewConfirmationBlockObject(
		plain("Approve this call?"),
		plain(cutPlain(text, maxConfirmText)),
		plain("Approve"),
		plain("Cancel"))
	if req.Risk == contracts.RiskCritical {
		return c.WithStyle(slackgo.StyleDanger)
	}
	return c.WithStyle(slackgo.StylePrimary)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// questionText is a question in a code block.
func questionText(q *contracts.Question) string {
	return codeText("*Question*", func(limit int) string { return notifier.Truncate(q.Text, limit) })
}

func jsonFormat(raw json.RawMessage) func(int) string {
	return func(limit int) string { return notifier.FormatJSON(raw, limit) }
}

// codeText is heading over a code block of format's text, escaped, with no
// fence inside, the whole at most a section's length. format(limit) gives
// the text cut to limit bytes.
func codeText(heading string, format func(limit int) string) string {
	const open, closing = "\n```\n", "\n```"
	budget := maxSectionText - len(heading) - len(open) - len(closing)
	limit := budget
	for {
		body := escape(breakFences(format(limit)))
		if len(body) <= budget || limit <= 64 {
			return heading + open + cutEscaped(body, budget) + closing
		}
		// Escaping grew the text: cut the source in proportion, and by
		// at least a little each round.
		limit = max(64, min(limit*budget/len(body), limit-64))
	}
}

// breakFences puts a zero-width space after every second backtick in a
// row, so no text can close (or open) a code block.
func breakFences(s string) string {
	if !strings.Contains(s, "```") {
		return s
	}
	var b strings.Builder
	run := 0
	for _, r := range s {
		if r == '`' {
			if run == 2 {
				b.WriteString("\u200b")
				run = 0
			}
			run++
		} else {
			run = 0
		}
		b.WriteRune(r)
	}
	return b.String()
}

var mrkdwnEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escape makes s literal text in Slack mrkdwn: Slack's control characters
// & < > become entities, so no text can mention, link or format a date.
func escape(s string) string { return mrkdwnEscaper.Replace(s) }

// escapeCut escapes s and cuts the result to max bytes.
func escapeCut(s string, max int) string { return cutEscaped(escape(s), max) }

// cutEscaped cuts escaped mrkdwn to at most max bytes at a rune boundary,
// never inside an entity, ending a cut text with "…".
func cutEscaped(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := runeStart(s, max-len("…"))
	if i := strings.LastIndexByte(s[:cut], '&'); i >= 0 && !strings.Contains(s[i:cut], ";") {
		cut = i
	}
	return s[:cut] + "…"
}

// cutPlain cuts plain text to at most max bytes at a rune boundary, ending a
// cut text with "…".
func cutPlain(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:runeStart(s, max-len("…"))] + "…"
}

// runeStart is the largest index <= i that starts a rune of s.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return max(i, 0)
}

func plain(s string) *slackgo.TextBlockObject {
	return slackgo.NewTextBlockObject(slackgo.PlainTextType, s, true, false)
}

func mrkdwn(s string) *slackgo.TextBlockObject {
	return slackgo.NewTextBlockObject(slackgo.MarkdownType, s, false, false)
}

// reminderMessage is a short reminder posted in the thread of a request's
// message: what is still waiting and how far the quorum got. The buttons
// stay on the message itself.
func reminderMessage(req *contracts.ApprovalRequested, rec *contracts.Record, publicURL string) Message {
	line := "⏰ *Reminder:* " + escapeCut(notifier.Title(req), maxFactText) + " still needs a decision (" +
		escapeCut(notifier.Progress(req, rec), maxFactText) + "). Decide with the buttons above."
	if u := notifier.ApprovalURL(publicURL, req.EventID); u != "" {
		line += " <" + u + "|Open in Countersign>"
	}
	var b builder
	b.add("reminder", slackgo.NewSectionBlock(mrkdwn(line), nil, nil))
	return b.message(req.EventID, escapeCut("Reminder: "+notifier.Title(req)+" still needs a decision", maxFallbackText))
}

// sensitiveHeading follows the arguments' heading when some values are
// masked.
func sensitiveHeading(req *contracts.ApprovalRequested) string {
	if note := notifier.SensitiveNote(req); note != "" {
		return "\n_" + escape(note) + "_"
	}
	return ""
}

// heldMessage tells a destination that reached the fan-out cap that more
// requests wait in the inbox. It shows nothing of any request.
func heldMessage(until time.Time, publicURL string) Message {
	line := escape(notifier.HeldLine(until))
	if u := notifier.InboxURL(publicURL); u != "" {
		line += " <" + u + "|Open the inbox>"
	}
	var b builder
	b.add("held", slackgo.NewSectionBlock(mrkdwn(line), nil, nil))
	return b.message(notifier.KindHeld+until.UTC().Format(time.RFC3339), escapeCut("More approval requests are waiting in Countersign", maxFallbackText))
}

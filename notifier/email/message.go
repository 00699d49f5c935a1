package email

import (
	"bytes"
	"embed"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// maxArguments bounds the arguments shown in an email or on a page.
const maxArguments = 8 << 10

// maxSubjectSummary bounds the summary in a subject line, in characters.
const maxSubjectSummary = 80

//go:embed templates
var templateFS embed.FS

var (
	textTemplates = texttemplate.Must(texttemplate.New("").ParseFS(templateFS, "templates/*.txt"))
	htmlTemplates = htmltemplate.Must(htmltemplate.New("").ParseFS(templateFS, "templates/*.html"))
)

// requestView is what the request and reminder emails show. Every string
// from the request is already made safe for plain text (oneLine, block);
// the HTML template escapes on top.
type requestView struct {
	Title     string
	Summary   string
	Reminder  bool
	Agent     string
	RunID     string
	Requester string
	Risk      string
	Expires   string
	ExpiresIn string
	Progress  string
	Rule      string
	Version   string
	Tool      string
	Arguments string
	Question  string
	// SensitiveNote says that masked values are sensitive, when some are.
	SensitiveNote string
	// Quoted forms of the blocks above, for plain text.
	ArgumentsQuoted string
	QuestionQuoted  string
	// ReviewURL is the personal link, empty when the address is not an
	// approver's; Approver is whom it is for.
	ReviewURL string
	Approver  string
	InboxURL  string
	// SignURL, for a request whose approvals need a passkey
	// (notifier.NeedsPasskey), is its inbox page, where approving is
	// signing; the email offers no other way to approve.
	SignURL string
}

// decidedView is what the outcome email shows.
type decidedView struct {
	Title         string
	Summary       string
	Agent         string
	RunID         string
	Outcome       string
	ContentLabel  string
	Content       string
	ContentQuoted string
	SensitiveNote string
	InboxURL      string
	DecidedAt     string
}

// subject is the subject of the request email of req; reminders say so.
func subject(req *contracts.ApprovalRequested, reminder bool) string {
	s := "[Countersign] "
	if reminder {
		s += "Reminder: "
	}
	s += oneLine(notifier.Title(req))
	if sum := oneLine(req.Summary); sum != "" {
		s += " — " + cut(sum, maxSubjectSummary)
	}
	return s
}

func newRequestView(req *contracts.ApprovalRequested, reminder bool, now time.Time) requestView {
	v := requestView{
		Title:     oneLine(notifier.Title(req)),
		Summary:   oneLine(req.Summary),
		Reminder:  reminder,
		Agent:     oneLine(req.Run.Agent),
		RunID:     oneLine(req.Run.ID),
		Requester: oneLine(req.Run.RequestedBy),
		Risk:      oneLine(req.Risk),
		Expires:   utc(req.ExpiresAt),
		ExpiresIn: relative(req.ExpiresAt, now),
		Progress:  notifier.Progress(req, nil),
		Rule:      oneLine(req.Policy.Rule),
		Version:   oneLine(req.Policy.Version),
	}
	if req.ToolCall != nil {
		v.Tool = oneLine(req.ToolCall.Name)
		v.Arguments = block(notifier.FormatJSON(notifier.ShownArguments(req, req.ToolCall.Arguments), maxArguments))
		v.ArgumentsQuoted = quote(v.Arguments, "    ")
		v.SensitiveNote = notifier.SensitiveNote(req)
	}
	if req.Kind == contracts.KindHumanInput {
		v.Progress = "" // one answer decides; there is no quorum to show
	}
	if req.Question != nil {
		v.Question = block(req.Question.Text)
		v.QuestionQuoted = quote(v.Question, "> ")
	}
	return v
}

func newDecidedView(rec *contracts.Record) decidedView {
	r := notifier.ForRecord(rec) // values its edits added are masked too
	req := &r
	v := decidedView{
		Title:   oneLine(notifier.Title(req)),
		Summary: oneLine(req.Summary),
		Agent:   oneLine(req.Run.Agent),
		RunID:   oneLine(req.Run.ID),
		Outcome: oneLine(notifier.OutcomeLine(rec)),
	}
	if o := rec.Outcome; o != nil {
		v.DecidedAt = utc(o.DecidedAt)
		if len(o.Arguments) > 0 {
			v.ContentLabel = "Final arguments"
			if req.Kind == contracts.KindHumanInput {
				v.ContentLabel = "Answer"
			} else if o.Decision != contracts.DecisionEdit {
				v.ContentLabel = "Arguments"
			}
			v.Content = block(notifier.FormatJSON(notifier.ShownArguments(req, o.Arguments), maxArguments))
			v.SensitiveNote = notifier.SensitiveNote(req)
			v.ContentQuoted = quote(v.Content, "    ")
		}
	}
	return v
}

// render executes the text and HTML templates called name with data.
func render(name string, data any) (text, html string, err error) {
	var t, h bytes.Buffer
	if err := textTemplates.ExecuteTemplate(&t, name+".txt", data); err != nil {
		return "", "", err
	}
	if err := htmlTemplates.ExecuteTemplate(&h, name+".html", data); err != nil {
		return "", "", err
	}
	return normalizeText(t.String()), h.String(), nil
}

// normalizeText trims the blank lines templates leave behind: at most one
// empty line in a row, none at the start, one line break at the end. (Lines
// keep trailing spaces: "-- " is the signature separator.)
func normalizeText(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	blank := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			if blank {
				continue
			}
			blank, l = true, ""
		} else {
			blank = false
		}
		out = append(out, l)
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n") + "\n"
}

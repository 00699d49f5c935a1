package notifier

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
)

// FormatJSON indents a JSON value for people and cuts it to at most max bytes
// (at a character boundary, never inside a multi-byte rune), ending a cut
// text with a line saying how much was left out. Invalid JSON is shown as
// it is, cut the same way. max <= 0 means no limit.
func FormatJSON(raw json.RawMessage, max int) string {
	var b bytes.Buffer
	s := string(raw)
	if json.Indent(&b, raw, "", "  ") == nil {
		s = unescapeHTML(b.String())
	}
	return Truncate(s, max)
}

// unescapeHTML turns the \u003c, \u003e and \u0026 escapes that Go's JSON
// encoder writes for <, > and & back into the characters, for people to
// read; a backslash that is itself escaped is left alone. Whoever renders
// the text escapes it for its medium.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\\' {
			b.WriteString(`\\`)
			i++
			continue
		}
		if i+6 <= len(s) {
			switch s[i : i+6] {
			case `\u003c`:
				b.WriteByte('<')
				i += 5
				continue
			case `\u003e`:
				b.WriteByte('>')
				i += 5
				continue
			case `\u0026`:
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Truncate cuts s to at most max bytes at a rune boundary; a cut text ends
// with "… (N more bytes)" (counted in the max). max <= 0 means no limit.
func Truncate(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	for reserve := 24; reserve <= max; reserve += 8 {
		cut := max - reserve
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		tail := fmt.Sprintf("\n… (%d more bytes)", len(s)-cut)
		if cut+len(tail) <= max {
			return s[:cut] + tail
		}
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Title is a one-line heading for a request: "Approval needed: <tool>" or
// "Input needed from a person".
func Title(req *contracts.ApprovalRequested) string {
	if req.Kind == contracts.KindHumanInput {
		return "Input needed by " + req.Run.Agent
	}
	if req.ToolCall != nil {
		return "Approval needed: " + req.ToolCall.Name
	}
	return "Approval needed"
}

// Approvals counts the distinct approvers whose approve (or edit) votes
// count towards the quorum in rec.
func Approvals(rec *contracts.Record) int {
	seen := map[string]bool{}
	for _, v := range rec.Votes {
		if v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit {
			seen[v.Approver.ID] = true
		}
	}
	return len(seen)
}

// Progress is the quorum progress of a pending record: "1 of 2 approvals".
// With no record yet it reads "0 of k approvals".
func Progress(req *contracts.ApprovalRequested, rec *contracts.Record) string {
	k := req.Quorum.Required
	if k < 1 {
		k = 1
	}
	n := 0
	if rec != nil {
		n = Approvals(rec)
	}
	if k == 1 {
		return fmt.Sprintf("%d of 1 approval", n)
	}
	return fmt.Sprintf("%d of %d approvals", n, k)
}

// OutcomeLine says how a terminal record was decided, for people:
// "Approved by bob via email, 2 of 2", "Rejected by carol via slack: too
// large", "Expired (no decision before the deadline)".
func OutcomeLine(rec *contracts.Record) string {
	o := rec.Outcome
	who := func() string {
		if o == nil || len(o.DecidedBy) == 0 {
			return ""
		}
		parts := make([]string, 0, len(o.DecidedBy))
		for _, id := range o.DecidedBy {
			via := ""
			for _, v := range rec.Votes {
				if v.Approver.ID == id {
					via = v.Approver.Via
				}
			}
			if via != "" {
				parts = append(parts, id+" via "+via)
			} else {
				parts = append(parts, id)
			}
		}
		return " by " + strings.Join(parts, ", ")
	}
	var s string
	switch rec.Status {
	case contracts.StatusApproved:
		if o != nil && len(o.DecidedBy) == 1 && o.DecidedBy[0] == contracts.DecidedByTimeout {
			return "Approved when the deadline passed (the rule approves on timeout)"
		}
		s = "Approved" + who()
		if o != nil && o.Decision == contracts.DecisionEdit {
			s = "Approved with edited arguments" + who()
		}
		k := max(rec.Request.Quorum.Required, 1)
		s += fmt.Sprintf(", %d of %d", min(Approvals(rec), k), k)
	case contracts.StatusRejected:
		s = "Rejected" + who()
	case contracts.StatusResponded:
		s = "Answered with feedback" + who()
	case contracts.StatusAnswered:
		s = "Answered" + who()
		if o != nil && o.Action != "" && o.Action != contracts.AnswerAccept {
			s += " (" + o.Action + ")"
		}
	case contracts.StatusExpired:
		s = "Expired (no decision before the deadline)"
	case contracts.StatusCancelled:
		s = "Cancelled" + who()
	default:
		return "Pending, " + Progress(&rec.Request, rec)
	}
	if o != nil && o.Comment != "" && rec.Status != contracts.StatusExpired {
		s += ": " + o.Comment
	}
	return s
}

// ApprovalURL is the web inbox page of an approval under base (the public
// URL of the Countersign HTTP server), or "" when base is empty.
func ApprovalURL(base, eventID string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/approvals/" + url.PathEscape(eventID)
}

// InboxURL is the web inbox under base ("" without one).
func InboxURL(base string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/"
}

// HeldLine is what a KindHeld message says: that more requests wait in the
// inbox than are sent at once, and from when new ones are sent again. It
// names no request.
func HeldLine(until time.Time) string {
	return "More approval requests are waiting for you than Countersign sends at once. They are listed in the inbox; " +
		"new ones are sent to you again from " + until.UTC().Format("15:04 UTC on 2 January") + "."
}

// NeedsPasskey reports whether an approval of req counts only when the
// approver signs it with a passkey (its rule says step_up: passkey). Only
// the web inbox can sign, so a channel offers no approve (or edit) for
// such a request: it links to the inbox page to sign instead, and keeps
// the decisions that need no signature (reject, respond).
func NeedsPasskey(req *contracts.ApprovalRequested) bool {
	return req.StepUp == contracts.StepUpPasskey && req.Kind != contracts.KindHumanInput
}

// SignInInbox labels the link that replaces Approve on a channel's
// message for a request that NeedsPasskey.
const SignInInbox = "Open in the inbox to sign"

// PasskeyNote explains, on a channel's message for a request that
// NeedsPasskey, why it offers no Approve.
const PasskeyNote = "This rule asks approvers to sign with their passkey: approve in the Countersign inbox."

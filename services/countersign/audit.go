package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// cmdAudit prints an approval's whole timeline: the request with its rule
// and policy version, where it was notified, reminders and escalations,
// every vote and refusal with approver and channel, the outcome and the
// execution claim.
func cmdAudit(args []string, out io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "export":
			return cmdAuditExport(args[1:], out)
		case "verify":
			return cmdAuditVerify(args[1:], out)
		}
	}
	fs := newFlagSet("audit", out)
	newClient := clientFlags(fs.FlagSet)
	jsonOut := fs.Bool("json", false, "print the API's JSON")
	ctx := context.Background()
	id, c, err := parseOne(ctx, fs, args, newClient)
	if err != nil {
		return err
	}
	var tl api.Timeline
	if _, err := c.do(ctx, "GET", "/v1/approvals/"+url.PathEscape(id)+"/events", nil, &tl); err != nil {
		return err
	}
	var rec recordAnswer
	if _, err := c.do(ctx, "GET", "/v1/approvals/"+url.PathEscape(id), nil, &rec); err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, tl)
	}
	printAudit(out, &rec.Record, tl)
	return nil
}

// printAudit writes one line per timeline entry.
func printAudit(out io.Writer, rec *contracts.Record, tl api.Timeline) {
	p := newAuditPrinter(out, rec, tl)
	fmt.Fprintf(out, "Approval %s (%s), status %s\n", rec.Request.EventID, rec.Request.Kind, rec.Status)
	for _, e := range tl.Events {
		switch e.Kind {
		case api.KindRequested:
			p.requested(e.At)
		case api.KindNotify:
			p.notified(e.At, e.Data)
		case api.KindChanged:
			p.changed(e.At, e.Data)
		case api.KindDecided:
			p.decided(e.At, e.Data)
		case api.KindRead:
			p.read(e.At, e.Data)
		}
	}
	if tl.Truncated {
		fmt.Fprintln(out, "(the timeline is longer; only its start is shown)")
	}
}

// auditPrinter writes an approval's timeline with what its record adds.
type auditPrinter struct {
	out     io.Writer
	rec     *contracts.Record
	votes   map[string]contracts.Vote        // counted, by vote id
	refused map[string]contracts.RefusedVote // refused, by vote id
	// announced are the votes a change event of the timeline announces.
	announced map[string]bool
}

func newAuditPrinter(out io.Writer, rec *contracts.Record, tl api.Timeline) *auditPrinter {
	p := &auditPrinter{out: out, rec: rec,
		votes: map[string]contracts.Vote{}, refused: map[string]contracts.RefusedVote{}, announced: map[string]bool{}}
	for _, v := range rec.Votes {
		p.votes[v.VoteID] = v
	}
	for _, v := range rec.RefusedVotes {
		p.refused[v.VoteID] = v
	}
	for _, e := range tl.Events {
		var ch contracts.Changed
		if e.Kind == api.KindChanged && json.Unmarshal(e.Data, &ch) == nil && ch.VoteID != "" {
			p.announced[ch.VoteID] = true
		}
	}
	return p
}

func (p *auditPrinter) line(at time.Time, what, text string) {
	fmt.Fprintf(p.out, "%s  %-10s %s\n", at.UTC().Format("2006-01-02T15:04:05.000Z"), what, text)
}

// requested writes what was asked, by whom, and under which policy.
func (p *auditPrinter) requested(at time.Time) {
	req := &p.rec.Request
	what := req.Summary
	if req.ToolCall != nil {
		what = fmt.Sprintf("%s %s", req.ToolCall.Name, compact(req.ToolCall.Arguments))
	} else if req.Question != nil {
		what = fmt.Sprintf("question %q", req.Question.Text)
	}
	approvers := "any approver"
	if len(req.Quorum.Approvers) > 0 {
		approvers = strings.Join(req.Quorum.Approvers, ", ")
	}
	p.line(at, "requested", fmt.Sprintf("by %s (run %s): %s", req.Run.Agent, req.Run.ID, what))
	policy := fmt.Sprintf("rule %s, policy %s, risk %s; %d of [%s]; expires %s", req.Policy.Rule, req.Policy.Version,
		req.Risk, req.Quorum.Required, approvers, req.ExpiresAt.UTC().Format(time.RFC3339))
	if req.Policy.Error != "" {
		policy += "; condition error: " + req.Policy.Error
	}
	p.line(at, "policy", policy)
}

// notified writes one notification's receipt.
// read writes a recorded read of the approval or export of its trail.
func (p *auditPrinter) read(at time.Time, data json.RawMessage) {
	var r contracts.Read
	if json.Unmarshal(data, &r) != nil {
		return
	}
	what := "opened"
	if r.What == contracts.ReadExport {
		what = "audit trail exported"
	}
	p.line(at, "read", fmt.Sprintf("%s by %s via %s", what, r.Reader, r.Surface))
}

func (p *auditPrinter) notified(at time.Time, data json.RawMessage) {
	var r contracts.NotifyReceipt
	if json.Unmarshal(data, &r) != nil {
		return
	}
	to := r.Target
	if r.Approver != "" && r.Approver != r.Target {
		to += " (" + r.Approver + ")"
	}
	text := fmt.Sprintf("%s %s to %s: %s", r.Channel, r.Kind, to, r.Status)
	if r.Error != "" {
		text += " — " + r.Error
	}
	p.line(at, "notified", text)
}

// changed writes one change of the record.
func (p *auditPrinter) changed(at time.Time, data json.RawMessage) {
	var ch contracts.Changed
	if json.Unmarshal(data, &ch) != nil {
		return
	}
	p.line(at, changeLabel(ch.Change), changeText(&ch, p.votes, p.refused, &p.rec.Request))
}

// decided writes the decision. The vote that decides is announced by the
// decided event, not by a change of its own: it is printed, from the
// record, just before it.
func (p *auditPrinter) decided(at time.Time, data json.RawMessage) {
	var d contracts.Decided
	if json.Unmarshal(data, &d) != nil {
		return
	}
	for _, v := range p.rec.Votes {
		if !p.announced[v.VoteID] {
			text := v.Decision + " by " + v.Approver.ID + " via " + v.Approver.Via
			if v.Comment != "" {
				text += ": " + v.Comment
			}
			p.line(v.DecidedAt, "vote", text)
		}
	}
	text := d.Status
	if o := d.Outcome; o != nil {
		text += " by " + strings.Join(o.DecidedBy, ", ")
		if o.Comment != "" {
			text += ": " + o.Comment
		}
		if len(o.Diff) > 0 {
			text += " (arguments edited: " + compact(o.Diff) + ")"
		}
	}
	p.line(at, "decided", text)
}

func changeLabel(change string) string {
	switch change {
	case contracts.ChangeVoteCounted:
		return "vote"
	case contracts.ChangeVoteRefused:
		return "refused"
	case contracts.ChangeClaimed:
		return "executed"
	}
	return strings.ReplaceAll(change, "_", " ")
}

func changeText(ch *contracts.Changed, votes map[string]contracts.Vote, refused map[string]contracts.RefusedVote, req *contracts.ApprovalRequested) string {
	who := ""
	if ch.Approver != nil {
		who = ch.Approver.ID + " via " + ch.Approver.Via
	}
	switch ch.Change {
	case contracts.ChangeVoteCounted:
		v := votes[ch.VoteID]
		text := v.Decision + " by " + who
		if v.Comment != "" {
			text += ": " + v.Comment
		}
		return text
	case contracts.ChangeVoteRefused:
		d := refused[ch.VoteID].Decision
		text := strings.TrimSpace(d+" by "+who) + " refused: " + ch.Reason
		if det := refused[ch.VoteID].Detail; det != "" {
			text += " (" + det + ")"
		}
		return text
	case contracts.ChangeClaimed:
		return "claimed by " + ch.By + " (cleared to run once; a claim does not show the call ran)"
	case contracts.ChangeExtended:
		return "deadline extended by " + ch.By
	case contracts.ChangeReminded:
		return fmt.Sprintf("reminder %d to approvers who have not voted", ch.Step)
	case contracts.ChangeEscalated:
		text := fmt.Sprintf("tier %d reached", ch.Step)
		if ch.Step >= 1 && ch.Step <= len(req.Escalation) {
			text += ": adds " + strings.Join(req.Escalation[ch.Step-1].Approvers, ", ")
		}
		return text
	}
	text := ch.Change
	if ch.By != "" {
		text += " by " + ch.By
	}
	if ch.Reason != "" {
		text += ": " + ch.Reason
	}
	return text
}

// compact is raw JSON on one line, cut for a terminal.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

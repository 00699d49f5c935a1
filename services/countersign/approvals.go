package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/services/api"
)

type recordAnswer struct {
	Record   contracts.Record `json:"record"`
	Revision uint64           `json:"revision"`
}

type listAnswer struct {
	Items      []recordAnswer `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// approvalsCmd is what every approvals subcommand gets: its flag set
// (with the client flags and, but for edit and answer, --json), and
// where to write.
type approvalsCmd struct {
	ctx       context.Context
	sub       string
	fs        *flagSet
	newClient func() (*client, error)
	out       io.Writer
	jsonOut   *bool
}

// approvalsSubs are the approvals subcommands.
var approvalsSubs = map[string]func(*approvalsCmd, []string) error{
	"ls":      approvalsList,
	"list":    approvalsList,
	"show":    approvalsShow,
	"approve": approvalsVote,
	"reject":  approvalsVote,
	"edit":    approvalsEdit,
	"respond": approvalsRespond,
	"answer":  approvalsAnswer,
	"extend":  approvalsExtend,
	"cancel":  approvalsCancel,
}

func cmdApprovals(args []string, out io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(out, usageText("approvals"))
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New("approvals: want " + approvalsSubcommands + " (see 'countersign approvals --help')")
	}
	sub, args := args[0], args[1:]
	run, ok := approvalsSubs[sub]
	if !ok {
		return fmt.Errorf("approvals: unknown subcommand %q (%s)", sub, approvalsSubcommands)
	}
	fs := newFlagSet("approvals "+sub, out)
	a := &approvalsCmd{ctx: context.Background(), sub: sub, fs: fs, newClient: clientFlags(fs.FlagSet), out: out, jsonOut: new(bool)}
	if sub != "edit" && sub != "answer" { // there --json is the input
		a.jsonOut = fs.Bool("json", false, "print the API's JSON")
	}
	return run(a, args)
}

func approvalsList(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out, jsonOut := a.ctx, a.fs, a.newClient, a.out, a.jsonOut
	status := fs.String("status", "pending", "status filter (pending, approved, rejected, ..., or all)")
	agent := fs.String("agent", "", "agent filter")
	runID := fs.String("run", "", "run id filter")
	mine := fs.Bool("mine", false, "only approvals I may decide")
	limit := fs.Int("limit", 50, "at most this many")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *status != "all" {
		q.Set("status", *status)
	}
	if *agent != "" {
		q.Set("agent", *agent)
	}
	if *runID != "" {
		q.Set("run_id", *runID)
	}
	if *mine {
		q.Set("approver", "me")
	}
	ans, err := listUpTo(ctx, c, q, *limit)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, ans)
	}
	if len(ans.Items) == 0 {
		fmt.Fprintln(out, "No approvals match.")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tSTATUS\tRISK\tAGENT\tTOOL\tAGE\tSUMMARY")
	for _, it := range ans.Items {
		r := it.Record.Request
		tool := ""
		if r.ToolCall != nil {
			tool = r.ToolCall.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.EventID, it.Record.Status, r.Risk, r.Run.Agent, tool,
			time.Since(r.CreatedAt).Round(time.Second), truncateText(r.Summary, 60))
	}
	return tw.Flush()
}

// listUpTo follows next_cursor until limit items are listed or the
// listing ends: a page of older history can come back short (the API
// bounds how much history one page looks through), or even empty.
func listUpTo(ctx context.Context, c *client, q url.Values, limit int) (listAnswer, error) {
	var all listAnswer
	for pages := 0; len(all.Items) < limit; pages++ {
		q.Set("limit", fmt.Sprint(limit-len(all.Items)))
		var ans listAnswer
		if _, err := c.do(ctx, "GET", "/v1/approvals?"+q.Encode(), nil, &ans); err != nil {
			return all, err
		}
		all.Items = append(all.Items, ans.Items...)
		all.NextCursor = ans.NextCursor
		if ans.NextCursor == "" || pages == maxListPages {
			break
		}
		q.Set("cursor", ans.NextCursor)
	}
	return all, nil
}

// maxListPages bounds the pages one `approvals ls` asks for.
const maxListPages = 1000

func approvalsShow(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out, jsonOut := a.ctx, a.fs, a.newClient, a.out, a.jsonOut
	wait := fs.Duration("wait", 0, "wait up to this long (max 60s) for a decision")
	id, c, err := parseOne(ctx, fs, args, newClient)
	if err != nil {
		return err
	}
	path := "/v1/approvals/" + url.PathEscape(id)
	if *wait > 0 {
		path += "?wait=" + wait.String()
	}
	var ans recordAnswer
	if _, err := c.do(ctx, "GET", path, nil, &ans); err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, ans)
	}
	printRecord(out, &ans.Record, ans.Revision)
	return nil
}

func approvalsVote(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out, jsonOut, sub := a.ctx, a.fs, a.newClient, a.out, a.jsonOut, a.sub
	comment := fs.String("comment", "", "comment kept with the vote")
	runID := fs.String("run", "", "decide every pending call of this run that you may decide")
	agent := fs.String("agent", "", "with --run: only this agent's calls")
	reason := new(string)
	var gf *grantFlags
	if sub == "reject" {
		reason = fs.String("reason", "", "why, returned to the agent")
	} else {
		gf = addGrantFlags(fs)
	}
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	switch {
	case *runID != "" && fs.NArg() > 0:
		return errors.New("give approval ids or --run RUN, not both")
	case *runID == "" && fs.NArg() == 0:
		return errors.New("want an approval id, several, or --run RUN")
	case *agent != "" && *runID == "":
		return errors.New("--agent narrows --run; give --run RUN too")
	}
	decision := contracts.DecisionApprove
	text := *comment
	if sub == "reject" {
		decision = contracts.DecisionReject
		if *reason != "" {
			text = *reason
		}
	}
	body := map[string]any{"decision": decision}
	if text != "" {
		body["comment"] = text
	}
	if gf != nil {
		g, err := gf.request()
		if err != nil {
			return err
		}
		if g != nil {
			body["grant"] = g
		}
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	if *runID != "" || fs.NArg() > 1 {
		return castBatch(ctx, c, out, body, fs.Args(), *runID, *agent, *jsonOut)
	}
	id, err := resolveID(ctx, c, fs.Arg(0))
	if err != nil {
		return err
	}
	ans, err := castVote(ctx, c, out, id, body, *jsonOut)
	if err == nil && ans != nil && !*jsonOut && body["grant"] != nil {
		if ans.Record.Terminal() {
			fmt.Fprintf(out, "Grant asked for (%s, %s): issued with the decision if the quorum agreed to it; see: countersign grants show %s\n",
				*gf.scope, *gf.ttl, ans.Record.Request.EventID)
		} else {
			fmt.Fprintf(out, "Grant asked for (%s, %s): issued with the decision once the quorum agrees; see: countersign grants show %s\n",
				*gf.scope, *gf.ttl, ans.Record.Request.EventID)
		}
	}
	return err
}

// castBatch casts vote (a vote's body) on each of ids, or on every pending
// call of run runID, in one request, and prints each result. Every vote
// carries its own vote id, so the request can be sent again safely. It
// fails when a vote was not counted.
func castBatch(ctx context.Context, c *client, out io.Writer, vote map[string]any, ids []string, runID, agent string, jsonOut bool) error {
	vote["via"] = contracts.ViaCLI
	var req map[string]any
	if runID != "" {
		vote["vote_id"] = uuid.Must(uuid.NewV7()).String()
		req = map[string]any{"run_id": runID, "vote": vote}
		if agent != "" {
			req["agent"] = agent
		}
	} else {
		votes := make([]map[string]any, 0, len(ids))
		for _, arg := range ids {
			id, err := resolveID(ctx, c, arg)
			if err != nil {
				return err
			}
			v := maps.Clone(vote)
			v["event_id"], v["vote_id"] = id, uuid.Must(uuid.NewV7()).String()
			votes = append(votes, v)
		}
		req = map[string]any{"votes": votes}
	}
	var ans api.BatchAnswer
	if _, err := c.do(ctx, "POST", "/v1/votes", req, &ans); err != nil {
		return err
	}
	if jsonOut {
		if err := printJSON(out, ans); err != nil {
			return err
		}
	} else {
		if len(ans.Results) == 0 {
			fmt.Fprintf(out, "No pending call of run %s waits for you.\n", runID)
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT ID\tRESULT\tSTATUS")
		for _, r := range ans.Results {
			what := r.ApprovalStatus
			switch {
			case r.Error != nil:
				what = r.Error.Code + ": " + r.Error.Message
			case r.Result == "in_flight":
				what = "sent; not counted yet"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.EventID, r.Result, what)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "%d counted, %d refused, %d in flight.\n", ans.Counted, ans.Refused, ans.InFlight)
		if ans.Truncated {
			fmt.Fprintf(out, "The run has more pending calls than one batch decides; run the command again for the rest.\n")
		}
	}
	if ans.Refused > 0 {
		return fmt.Errorf("%d of %d votes were not counted", ans.Refused, len(ans.Results))
	}
	return nil
}

func approvalsEdit(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out := a.ctx, a.fs, a.newClient, a.out
	argsFile := fs.String("args", "", "file with the new arguments (a JSON object; - reads stdin)")
	argsJSON := fs.String("json", "", "the new arguments as a JSON object")
	comment := fs.String("comment", "", "comment kept with the vote")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	id, err := oneID(fs)
	if err != nil {
		return err
	}
	edited, err := jsonInput(*argsFile, *argsJSON, "--args FILE or --json '{...}'")
	if err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	if id, err = resolveID(ctx, c, id); err != nil {
		return err
	}
	// What the approver edits: the arguments under review now. The
	// vote carries their hash, so an edit of stale arguments is refused.
	var before recordAnswer
	if _, err := c.do(ctx, "GET", "/v1/approvals/"+url.PathEscape(id), nil, &before); err != nil {
		return err
	}
	underReview := argumentsUnderReview(&before.Record)
	body := map[string]any{"decision": contracts.DecisionEdit, "arguments": edited}
	if sha, err := contracts.ArgumentsSHA256(underReview); err == nil && underReview != nil {
		body["arguments_sha256"] = sha
	}
	if *comment != "" {
		body["comment"] = *comment
	}
	ans, err := castVote(ctx, c, out, id, body, false)
	if err != nil || ans == nil {
		return err
	}
	fmt.Fprintln(out, "Changes (RFC 6902, from the arguments under review):")
	printDiff(out, approval.Diff(underReview, edited))
	return nil
}

func approvalsRespond(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out, jsonOut := a.ctx, a.fs, a.newClient, a.out, a.jsonOut
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 2 || strings.TrimSpace(fs.Arg(1)) == "" {
		return errors.New(`want an approval id and the text for the agent: approvals respond ID "text"`)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	id, err := resolveID(ctx, c, fs.Arg(0))
	if err != nil {
		return err
	}
	_, err = castVote(ctx, c, out, id, map[string]any{"decision": contracts.DecisionRespond, "comment": fs.Arg(1)}, *jsonOut)
	return err
}

func approvalsAnswer(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out := a.ctx, a.fs, a.newClient, a.out
	content := fs.String("json", "", "the answer as JSON (it must satisfy the question's schema)")
	text := fs.String("text", "", `a free-text answer, sent as {"text": TEXT}`)
	decline := fs.Bool("decline", false, "decline to answer")
	cancel := fs.Bool("cancel", false, "dismiss the question without answering")
	comment := fs.String("comment", "", "comment kept with the vote")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	id, err := oneID(fs)
	if err != nil {
		return err
	}
	answer := map[string]any{}
	switch given := countTrue(*content != "", *text != "", *decline, *cancel); {
	case given != 1:
		return errors.New("answer: give exactly one of --json '{...}', --text TEXT, --decline or --cancel")
	case *decline:
		answer["action"] = "decline"
	case *cancel:
		answer["action"] = "cancel"
	case *text != "":
		answer["action"], answer["content"] = "accept", map[string]string{"text": *text}
	default:
		raw, err := jsonInput("", *content, "--json")
		if err != nil {
			return err
		}
		answer["action"], answer["content"] = "accept", raw
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	if id, err = resolveID(ctx, c, id); err != nil {
		return err
	}
	body := map[string]any{"decision": contracts.DecisionAnswer, "answer": answer}
	if *comment != "" {
		body["comment"] = *comment
	}
	_, err = castVote(ctx, c, out, id, body, false)
	return err
}

func approvalsExtend(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out, jsonOut := a.ctx, a.fs, a.newClient, a.out, a.jsonOut
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return errors.New("want an approval id and a duration or time: approvals extend ID 2h (or 2030-01-02T15:04:05Z)")
	}
	id, when := fs.Arg(0), fs.Arg(1)
	body := map[string]any{"by": when}
	if _, err := time.Parse(time.RFC3339, when); err == nil {
		body = map[string]any{"until": when}
	} else if d, err := time.ParseDuration(when); err != nil || d <= 0 {
		return fmt.Errorf("extend: %q is neither a positive duration (2h, 30m) nor an RFC 3339 time", when)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	if id, err = resolveID(ctx, c, id); err != nil {
		return err
	}
	var ans recordAnswer
	status, err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/extend", body, &ans)
	if err != nil {
		return err
	}
	if status == 202 {
		fmt.Fprintf(out, "Extension sent; the arbiter has not applied it yet. Check with: countersign approvals show %s\n", id)
		return nil
	}
	if *jsonOut {
		return printJSON(out, ans)
	}
	fmt.Fprintf(out, "Extended %s: it now expires at %s.\n", id, ans.Record.ExpiresAt.Format(time.RFC3339))
	return nil
}

func approvalsCancel(a *approvalsCmd, args []string) error {
	ctx, fs, newClient, out := a.ctx, a.fs, a.newClient, a.out
	reason := fs.String("reason", "", "why the request is cancelled")
	id, c, err := parseOne(ctx, fs, args, newClient)
	if err != nil {
		return err
	}
	var ans recordAnswer
	if _, err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/cancel", map[string]any{"reason": *reason}, &ans); err != nil {
		return err
	}
	fmt.Fprintf(out, "Cancelled %s.\n", id)
	return nil
}

const approvalsSubcommands = "ls, show, approve, reject, edit, respond, answer, extend or cancel"

// castVote sends a vote as the CLI's token and says what came of it. It
// returns the record after the vote, or nil when the arbiter has not
// counted it yet.
func castVote(ctx context.Context, c *client, out io.Writer, id string, body map[string]any, jsonOut bool) (*recordAnswer, error) {
	body["via"] = contracts.ViaCLI
	var ans recordAnswer
	status, err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/votes", body, &ans)
	if err != nil {
		return nil, err
	}
	if status == 202 {
		fmt.Fprintf(out, "Vote sent; the arbiter has not counted it yet. Check with: countersign approvals show %s\n", id)
		return nil, nil
	}
	if jsonOut {
		return &ans, printJSON(out, ans)
	}
	fmt.Fprintf(out, "Vote counted: %s %s. Status is now %s.\n", body["decision"], id, ans.Record.Status)
	return &ans, nil
}

// jsonInput reads a JSON value from a file (- for stdin) or an inline
// string; exactly one must be given.
func jsonInput(file, inline, what string) (json.RawMessage, error) {
	var data []byte
	switch {
	case (file == "") == (inline == ""):
		return nil, errors.New("give exactly one of " + what)
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return nil, err
		}
		data = b
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		data = b
	default:
		data = []byte(inline)
	}
	if err := contracts.CheckDuplicateKeys(data); err != nil {
		if dup, ok := errors.AsType[*contracts.DuplicateKeyError](err); ok {
			return nil, fmt.Errorf("the input gives the key %q twice", dup.Path)
		}
		return nil, errors.New("the input is not valid JSON")
	}
	return json.RawMessage(bytes.TrimSpace(data)), nil
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// argumentsUnderReview is what an approver edits: the newest counted
// edit's arguments, else the requested ones.
func argumentsUnderReview(rec *contracts.Record) json.RawMessage {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		if rec.Votes[i].Decision == contracts.DecisionEdit {
			return rec.Votes[i].Arguments
		}
	}
	if rec.Request.ToolCall != nil {
		return rec.Request.ToolCall.Arguments
	}
	return nil
}

// printDiff prints an RFC 6902 patch one operation a line.
func printDiff(out io.Writer, patch json.RawMessage) {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil || len(ops) == 0 {
		fmt.Fprintln(out, "  (none)")
		return
	}
	for _, op := range ops {
		if op.Op == "remove" {
			fmt.Fprintf(out, "  %-7s %s\n", op.Op, op.Path)
			continue
		}
		fmt.Fprintf(out, "  %-7s %s = %s\n", op.Op, op.Path, op.Value)
	}
}

// reorder moves the leading positional arguments (the ID, and a text or
// duration after it) behind the flags, so both "approve ID --comment x" and
// "approve --comment x ID" work.
func reorder(args []string) []string {
	n := 0
	for n < len(args) && !strings.HasPrefix(args[n], "-") {
		n++
	}
	if n == 0 || n == len(args) {
		return args
	}
	return append(slices.Clone(args[n:]), args[:n]...)
}

// parseOne parses the flags of a command on one approval and returns its
// id (resolved from a prefix, see resolveID) and an API client.
func parseOne(ctx context.Context, fs *flagSet, args []string, newClient func() (*client, error)) (string, *client, error) {
	if err := fs.Parse(reorder(args)); err != nil {
		return "", nil, err
	}
	id, err := oneID(fs)
	if err != nil {
		return "", nil, err
	}
	c, err := newClient()
	if err != nil {
		return "", nil, err
	}
	if id, err = resolveID(ctx, c, id); err != nil {
		return "", nil, err
	}
	return id, c, nil
}

func oneID(fs *flagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", errors.New("want exactly one approval id")
	}
	return fs.Arg(0), nil
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func truncateText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func printRecord(out io.Writer, rec *contracts.Record, rev uint64) {
	printRequest(out, rec, rev)
	printProgress(out, rec)
	printVotes(out, rec)
	printOutcome(out, rec)
}

// printRequest writes what is asked and under which policy.
func printRequest(out io.Writer, rec *contracts.Record, rev uint64) {
	r := rec.Request
	fmt.Fprintf(out, "Approval %s\n", r.EventID)
	fmt.Fprintf(out, "  Status:    %s\n", rec.Status)
	// The KV revision is the bucket's sequence number of the record's last
	// write: it orders versions of this record, but it counts the writes of
	// every approval, not this record's changes.
	fmt.Fprintf(out, "  Revision:  %d (%s KV revision of the last write; bucket-wide, not a count of this record's changes)\n", rev, contracts.BucketApprovals)
	fmt.Fprintf(out, "  Summary:   %s\n", r.Summary)
	fmt.Fprintf(out, "  Agent:     %s  run %s\n", r.Run.Agent, r.Run.ID)
	if r.ToolCall != nil {
		fmt.Fprintf(out, "  Tool:      %s\n", r.ToolCall.Name)
		fmt.Fprintf(out, "  Arguments: %s\n", string(r.ToolCall.Arguments))
		if len(r.ToolSchema) > 0 {
			fmt.Fprintf(out, "  Schema:    %s\n", truncateText(string(r.ToolSchema), 200))
		}
	}
	if q := r.Question; q != nil {
		fmt.Fprintf(out, "  Question:  %s\n", q.Text)
		if len(q.Schema) > 0 {
			fmt.Fprintf(out, "  Answer schema: %s\n", truncateText(string(q.Schema), 200))
		}
	}
	if len(r.AllowedDecisions) > 0 {
		fmt.Fprintf(out, "  Decisions: %s\n", strings.Join(r.AllowedDecisions, ", "))
	}
	fmt.Fprintf(out, "  Risk:      %s   rule %s (policy %s)\n", r.Risk, r.Policy.Rule, r.Policy.Version)
	if r.Policy.Error != "" {
		fmt.Fprintf(out, "  Policy error: %s (a condition that errors gates the call)\n", r.Policy.Error)
	}
}

// printProgress writes how far the approval is: quorum, deadlines,
// reminders and escalation tiers.
func printProgress(out io.Writer, rec *contracts.Record) {
	r := rec.Request
	approvers := "any approver"
	if len(r.Quorum.Approvers) > 0 {
		approvers = strings.Join(r.Quorum.Approvers, ", ")
	}
	// Approvals count for the arguments under review: an edit restarts the
	// count with the editor's own approval.
	approved := 0
	for _, v := range rec.Votes {
		switch v.Decision {
		case contracts.DecisionEdit:
			approved = 1
		case contracts.DecisionApprove:
			approved++
		}
	}
	fmt.Fprintf(out, "  Quorum:    %d of %d (%s)\n", approved, r.Quorum.Required, approvers)
	fmt.Fprintf(out, "  Created:   %s   expires %s\n", r.CreatedAt.Format(time.RFC3339), rec.ExpiresAt.Format(time.RFC3339))
	if len(r.Reminders) > 0 {
		fmt.Fprintf(out, "  Reminders: after %s\n", strings.Join(r.Reminders, ", "))
	}
	for i, tier := range r.Escalation {
		state := "not reached"
		if i < rec.EscalationLevel {
			state = "reached"
		}
		fmt.Fprintf(out, "  Tier %d:    after %s adds %s (%s)\n", i+1, tier.After, strings.Join(tier.Approvers, ", "), state)
	}
}

// printVotes writes the counted and the refused votes.
func printVotes(out io.Writer, rec *contracts.Record) {
	for _, v := range rec.Votes {
		fmt.Fprintf(out, "  Vote:      %s by %s via %s %s\n", v.Decision, v.Approver.ID, v.Approver.Via, v.Comment)
		if v.Decision == contracts.DecisionEdit {
			fmt.Fprintf(out, "             arguments %s\n", v.Arguments)
		}
	}
	for _, v := range rec.RefusedVotes {
		fmt.Fprintf(out, "  Refused:   %s by %s: %s", v.Decision, v.Approver.ID, v.Reason)
		if v.Detail != "" {
			fmt.Fprintf(out, " (%s)", v.Detail)
		}
		fmt.Fprintln(out)
	}
}

// printOutcome writes the decision, if there is one, and the claim.
func printOutcome(out io.Writer, rec *contracts.Record) {
	if o := rec.Outcome; o != nil {
		fmt.Fprintf(out, "  Outcome:   %s by %s at %s", o.Decision, strings.Join(o.DecidedBy, ", "), o.DecidedAt.Format(time.RFC3339))
		if o.Comment != "" {
			fmt.Fprintf(out, " — %s", o.Comment)
		}
		fmt.Fprintln(out)
		switch {
		case o.Action != "":
			fmt.Fprintf(out, "  Answer:    %s %s\n", o.Action, o.Arguments)
		case len(o.Diff) > 0:
			fmt.Fprintf(out, "  Approved:  %s\n", o.Arguments)
			fmt.Fprintln(out, "  Changes:")
			printDiff(out, o.Diff)
		}
	}
	if c := rec.Claim; c != nil {
		fmt.Fprintf(out, "  Claimed:   at %s by claim %s; the outcome of the tool call is unknown to Countersign\n", c.At.Format(time.RFC3339), c.ClaimID)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/contracts"
)

type recordAnswer struct {
	Record   contracts.Record `json:"record"`
	Revision uint64           `json:"revision"`
}

type listAnswer struct {
	Items      []recordAnswer `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

func cmdApprovals(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("approvals: want ls, show, approve, reject or cancel")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("approvals "+sub, flag.ContinueOnError)
	newClient := clientFlags(fs)
	jsonOut := fs.Bool("json", false, "print the API's JSON")
	ctx := context.Background()
	switch sub {
	case "ls", "list":
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
		q.Set("limit", fmt.Sprint(*limit))
		var ans listAnswer
		if _, err := c.do(ctx, "GET", "/v1/approvals?"+q.Encode(), nil, &ans); err != nil {
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
	case "show":
		wait := fs.Duration("wait", 0, "wait up to this long (max 60s) for a decision")
		if err := fs.Parse(reorder(args)); err != nil {
			return err
		}
		id, err := oneID(fs)
		if err != nil {
			return err
		}
		c, err := newClient()
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
	case "approve", "reject":
		comment := fs.String("comment", "", "comment kept with the vote")
		reason := fs.String("reason", "", "reason, returned to the agent (reject)")
		if err := fs.Parse(reorder(args)); err != nil {
			return err
		}
		id, err := oneID(fs)
		if err != nil {
			return err
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		decision := contracts.DecisionApprove
		text := *comment
		if sub == "reject" {
			decision = contracts.DecisionReject
			if *reason != "" {
				text = *reason
			}
		}
		body := map[string]any{"decision": decision, "via": contracts.ViaCLI}
		if text != "" {
			body["comment"] = text
		}
		var ans recordAnswer
		status, err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/votes", body, &ans)
		if err != nil {
			return err
		}
		if status == 202 {
			fmt.Fprintf(out, "Vote sent; the arbiter has not counted it yet. Check with: countersign approvals show %s\n", id)
			return nil
		}
		if *jsonOut {
			return printJSON(out, ans)
		}
		fmt.Fprintf(out, "Vote counted: %s %s. Status is now %s.\n", decision, id, ans.Record.Status)
		return nil
	case "cancel":
		reason := fs.String("reason", "", "why the request is cancelled")
		if err := fs.Parse(reorder(args)); err != nil {
			return err
		}
		id, err := oneID(fs)
		if err != nil {
			return err
		}
		c, err := newClient()
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
	return fmt.Errorf("approvals: unknown subcommand %q (ls, show, approve, reject, cancel)", sub)
}

// reorder moves a leading positional ID behind the flags, so both
// "approve ID --comment x" and "approve --comment x ID" work.
func reorder(args []string) []string {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return append(args[1:len(args):len(args)], args[0])
	}
	return args
}

func oneID(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", errors.New("want exactly one approval id")
	}
	return fs.Arg(0), nil
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
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
	r := rec.Request
	fmt.Fprintf(out, "Approval %s  (revision %d)\n", r.EventID, rev)
	fmt.Fprintf(out, "  Status:    %s\n", rec.Status)
	fmt.Fprintf(out, "  Summary:   %s\n", r.Summary)
	fmt.Fprintf(out, "  Agent:     %s  run %s\n", r.Run.Agent, r.Run.ID)
	if r.ToolCall != nil {
		fmt.Fprintf(out, "  Tool:      %s\n", r.ToolCall.Name)
		fmt.Fprintf(out, "  Arguments: %s\n", string(r.ToolCall.Arguments))
	}
	fmt.Fprintf(out, "  Risk:      %s   rule %s (policy %s)\n", r.Risk, r.Policy.Rule, r.Policy.Version)
	approvers := "any approver"
	if len(r.Quorum.Approvers) > 0 {
		approvers = strings.Join(r.Quorum.Approvers, ", ")
	}
	approved := 0
	for _, v := range rec.Votes {
		if v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit {
			approved++
		}
	}
	fmt.Fprintf(out, "  Quorum:    %d of %d (%s)\n", approved, r.Quorum.Required, approvers)
	fmt.Fprintf(out, "  Created:   %s   expires %s\n", r.CreatedAt.Format(time.RFC3339), rec.ExpiresAt.Format(time.RFC3339))
	for _, v := range rec.Votes {
		fmt.Fprintf(out, "  Vote:      %s by %s via %s %s\n", v.Decision, v.Approver.ID, v.Approver.Via, v.Comment)
	}
	for _, v := range rec.RefusedVotes {
		fmt.Fprintf(out, "  Refused:   %s by %s: %s\n", v.Decision, v.Approver.ID, v.Reason)
	}
	if o := rec.Outcome; o != nil {
		fmt.Fprintf(out, "  Outcome:   %s by %s at %s", o.Decision, strings.Join(o.DecidedBy, ", "), o.DecidedAt.Format(time.RFC3339))
		if o.Comment != "" {
			fmt.Fprintf(out, " — %s", o.Comment)
		}
		fmt.Fprintln(out)
	}
	if rec.Claim != nil {
		fmt.Fprintf(out, "  Executed:  claimed at %s\n", rec.Claim.At.Format(time.RFC3339))
	}
}

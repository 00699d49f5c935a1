package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"
)

type demoCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type reviewResult struct {
	ToolCallID string          `json:"tool_call_id"`
	Verdict    string          `json:"verdict"`
	EventID    string          `json:"event_id"`
	Reason     string          `json:"reason"`
	Rule       string          `json:"rule"`
	Arguments  json.RawMessage `json:"arguments"`
}

// demoScript is what the simulated fleet proposes: safe reads, a forbidden
// shell command, and calls a human must approve.
var demoScript = []struct {
	agent string
	calls []demoCall
}{
	{"research-assistant", []demoCall{
		{Name: "search_web", Arguments: json.RawMessage(`{"query":"EU VAT rules for SaaS invoices"}`)},
		{Name: "read_file", Arguments: json.RawMessage(`{"path":"reports/q3-summary.md"}`)},
	}},
	{"billing-bot", []demoCall{
		{Name: "payments.send", Arguments: json.RawMessage(`{"amount":1250,"currency":"EUR","recipient":"Globex GmbH","reference":"INV-2026-0412"}`)},
	}},
	{"ops-agent", []demoCall{
		{Name: "shell.exec", Arguments: json.RawMessage(`{"cmd":"rm -rf /var/lib/postgres"}`)},
		{Name: "db.delete_rows", Arguments: json.RawMessage(`{"database":"prod","table":"customers","where":"last_login < '2020-01-01'"}`)},
	}},
	{"support-agent", []demoCall{
		{Name: "email.send", Arguments: json.RawMessage(`{"to":"ceo@example.com","subject":"Refund approved","body":"Hello, your refund of 49 EUR is on its way."}`)},
	}},
}

func cmdDemo(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	newClient := clientFlags(fs)
	noWait := fs.Bool("no-wait", false, "propose the calls and exit without waiting for decisions")
	rounds := fs.Int("rounds", 1, "how many times the fleet proposes its calls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	type runState struct {
		agent string
		run   map[string]any
		calls []demoCall
	}
	var runs []runState
	for round := 0; round < *rounds; round++ {
		for _, s := range demoScript {
			runID := "demo-" + uuid.NewString()[:8]
			calls := make([]demoCall, len(s.calls))
			for i, call := range s.calls {
				call.ID = fmt.Sprintf("call-%d", i+1)
				calls[i] = call
			}
			runs = append(runs, runState{agent: s.agent, calls: calls, run: map[string]any{
				"id": runID, "agent": s.agent, "requested_by": "demo-user", "tenant": "demo",
			}})
		}
	}
	pending := 0
	for _, r := range runs {
		var ans struct {
			Results []reviewResult `json:"results"`
		}
		if _, err := c.do(ctx, "POST", "/v1/reviews", map[string]any{"run": r.run, "tool_calls": r.calls}, &ans); err != nil {
			return err
		}
		for i, res := range ans.Results {
			fmt.Fprintf(out, "%-18s %-16s → %s", r.agent, r.calls[i].Name, res.Verdict)
			switch res.Verdict {
			case "allowed":
				fmt.Fprintf(out, " (rule %s) — runs now\n", res.Rule)
			case "denied":
				fmt.Fprintf(out, " (rule %s): %s\n", res.Rule, res.Reason)
			case "pending":
				pending++
				fmt.Fprintf(out, " — waiting for a human: countersign approvals approve %s\n", res.EventID)
			default:
				fmt.Fprintf(out, " %s\n", res.Reason)
			}
		}
	}
	if *noWait || pending == 0 {
		return nil
	}
	fmt.Fprintf(out, "\n%d call(s) wait for a decision. Approve or reject them with the CLI or the API; Ctrl-C stops the demo.\n\n", pending)
	for _, r := range runs {
		for {
			var ans struct {
				Results []reviewResult `json:"results"`
			}
			// Reviewing the same run and tool call ids again re-attaches to the
			// same approvals; ?wait blocks until they are decided.
			if _, err := c.do(ctx, "POST", "/v1/reviews?wait=60s", map[string]any{"run": r.run, "tool_calls": r.calls}, &ans); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			done := true
			for _, res := range ans.Results {
				if res.Verdict == "pending" {
					done = false
				}
			}
			if !done {
				continue
			}
			for i, res := range ans.Results {
				if res.EventID == "" {
					continue
				}
				fmt.Fprintf(out, "%-18s %-16s → %s", r.agent, r.calls[i].Name, res.Verdict)
				if res.Verdict == "allowed" {
					_, err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(res.EventID)+"/claim", map[string]any{}, nil)
					if err != nil {
						fmt.Fprintf(out, " — not run: %v\n", err)
						continue
					}
					fmt.Fprintf(out, " — claimed and executed with %s at %s\n", string(res.Arguments), time.Now().Format(time.TimeOnly))
					continue
				}
				if res.Reason != "" {
					fmt.Fprintf(out, ": %s", res.Reason)
				}
				fmt.Fprintln(out)
			}
			break
		}
	}
	return nil
}

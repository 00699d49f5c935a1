package main

import (
	"context"
	"encoding/json"
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

// fleetScript is a day in a small agent fleet, for filling the web inbox:
// refunds, a production deploy, customer email and schema migrations, with
// a few calls the policy lets through or forbids on the way.
var fleetScript = []struct {
	agent string
	calls []demoCall
}{
	{"billing-refunds", []demoCall{
		{Name: "get_invoice", Arguments: json.RawMessage(`{"invoice":"INV-2026-0412"}`)},
		{Name: "payments.refund", Arguments: json.RawMessage(`{"amount":48,"currency":"EUR","recipient":"Jane Doe","reference":"CASE-88412","reason":"charged twice for the March plan"}`)},
	}},
	{"billing-refunds", []demoCall{
		{Name: "payments.refund", Arguments: json.RawMessage(`{"amount":12500,"currency":"EUR","recipient":"Globex GmbH","reference":"INV-2026-0398","reason":"annual contract cancelled within the trial window"}`)},
	}},
	{"deploy-bot", []demoCall{
		{Name: "get_build_status", Arguments: json.RawMessage(`{"service":"checkout","version":"v2.14.0"}`)},
		{Name: "deploy.release", Arguments: json.RawMessage(`{"service":"checkout","version":"v2.14.0","env":"production","strategy":"canary 10% for 30m, then all"}`)},
	}},
	{"support-mailer", []demoCall{
		{Name: "email.send", Arguments: json.RawMessage(`{"to":"jane.doe@example.com","subject":"Your refund is on its way","body":"Hello Jane,\n\nWe refunded the duplicate charge of 48 EUR on your March invoice. It will appear on your statement within 5 business days.\n\nBest regards,\nSupport"}`)},
	}},
	{"db-migrator", []demoCall{
		{Name: "db.update_schema", Arguments: json.RawMessage(`{"database":"orders","table":"refunds","migration":"0042_add_refund_reason","sql":"ALTER TABLE refunds ADD COLUMN reason text NOT NULL DEFAULT ''"}`)},
		{Name: "shell.exec", Arguments: json.RawMessage(`{"cmd":"psql orders -c 'VACUUM FULL refunds'"}`)},
	}},
	{"db-migrator", []demoCall{
		{Name: "db.delete_rows", Arguments: json.RawMessage(`{"database":"sessions","table":"web_sessions","where":"expires_at < now() - interval '90 days'"}`)},
	}},
}

func cmdDemo(args []string, out io.Writer) error {
	fs := newFlagSet("demo", out)
	newClient := clientFlags(fs.FlagSet)
	noWait := fs.Bool("no-wait", false, "propose the calls and exit without waiting for decisions")
	rounds := fs.Int("rounds", 1, "how many times the fleet proposes its calls")
	fleet := fs.Bool("fleet", false, "fill the web inbox: a fleet of agents (refunds, deploys, email, migrations) proposes calls and leaves them pending (implies --no-wait)")
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
	script := demoScript
	if *fleet {
		script, *noWait = fleetScript, true
	}
	var runs []runState
	for round := 0; round < *rounds; round++ {
		for _, s := range script {
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
	if pending > 0 {
		fmt.Fprintf(out, "\nInbox: %s/ (sign in with an approver's API token)\n", c.url)
	}
	if *noWait || pending == 0 {
		return nil
	}
	fmt.Fprintf(out, "\n%d call(s) wait for a decision. Approve or reject them in the inbox, with the CLI or the API; Ctrl-C stops the demo.\n\n", pending)
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

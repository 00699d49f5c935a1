package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
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

// demoAgent is one agent of a demo script and the calls it proposes.
type demoAgent struct {
	agent string
	calls []demoCall
}

// demoScript is what the simulated fleet proposes: safe reads, a forbidden
// shell command, and calls a human must approve.
var demoScript = []demoAgent{
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
var fleetScript = []demoAgent{
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
	session := fs.String("session", "", `demo session: its runs keep their ids, so running the demo again re-attaches to the same approvals (default: the session kept in the data directory; "new" starts another)`)
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
	dataDir := firstNonEmpty(fs.Lookup("data").Value.String(), os.Getenv("COUNTERSIGN_DATA"), "./data")
	sess, kept, err := demoSession(dataDir, *session)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{c: c, out: out, claimID: "demo-" + uuid.NewString(), self: invokedAs()}
	script, name := demoScript, "demo"
	if *fleet {
		script, name, *noWait = fleetScript, "fleet", true
	}
	if kept {
		fmt.Fprintf(out, "Demo session %s (kept in %s): running the demo again re-attaches to its approvals; --session new starts another.\n\n",
			sess, filepath.Join(dataDir, fileDemoSession))
	} else {
		fmt.Fprintf(out, "Demo session %s: run the demo again with --session %s to re-attach to its approvals.\n\n", sess, sess)
	}
	runs := demoRuns(script, name, sess, *rounds)
	pending, err := d.propose(ctx, runs)
	if err != nil {
		return quietOnInterrupt(ctx, err)
	}
	if pending > 0 {
		hint := "sign in with an approver's API token"
		if tok := filepath.Join(dataDir, fileDevToken); fileExists(tok) {
			hint += "; the development token is in " + tok
		}
		fmt.Fprintf(out, "\nInbox: %s/ (%s)\n", c.url, hint)
	}
	if *noWait || pending == 0 {
		return nil
	}
	fmt.Fprintf(out, "\n%d call(s) wait for a decision. Approve or reject them in the inbox, with the CLI or the API; Ctrl-C stops the demo,\n"+
		"and running it again picks up where it stopped. The demo keeps waiting while the server restarts.\n\n", pending)
	for _, r := range runs {
		results, err := d.awaitDecided(ctx, r)
		if err != nil {
			return quietOnInterrupt(ctx, err)
		}
		if !d.execute(ctx, r, results) {
			return nil
		}
	}
	return nil
}

// demoRun is one run the demo reviews.
type demoRun struct {
	agent string
	run   map[string]any
	calls []demoCall
}

// demoRuns are the script's runs, rounds times over.
func demoRuns(script []demoAgent, name, sess string, rounds int) []demoRun {
	var runs []demoRun
	for round := 0; round < rounds; round++ {
		for i, s := range script {
			// Stable run ids: the same session, round and place give the
			// same run, so reviewing it again re-attaches (DESIGN §2).
			runID := fmt.Sprintf("%s-%s-%d-%d", name, sess, round+1, i+1)
			calls := make([]demoCall, len(s.calls))
			for j, call := range s.calls {
				call.ID = fmt.Sprintf("call-%d", j+1)
				calls[j] = call
			}
			runs = append(runs, demoRun{agent: s.agent, calls: calls, run: map[string]any{
				"id": runID, "agent": s.agent, "requested_by": "demo-user", "tenant": "demo",
			}})
		}
	}
	return runs
}

// review posts the run for review; query is added to the path.
func (d *demo) review(ctx context.Context, r demoRun, query string) ([]reviewResult, error) {
	var ans struct {
		Results []reviewResult `json:"results"`
	}
	err := d.retry(ctx, func() error {
		_, err := d.c.do(ctx, "POST", "/v1/reviews"+query, map[string]any{"run": r.run, "tool_calls": r.calls}, &ans)
		return err
	})
	return ans.Results, err
}

// propose reviews every run once and prints each call's verdict; it
// returns how many calls wait for a human.
func (d *demo) propose(ctx context.Context, runs []demoRun) (int, error) {
	pending := 0
	for _, r := range runs {
		results, err := d.review(ctx, r, "")
		if err != nil {
			return pending, err
		}
		for i, res := range results {
			fmt.Fprintf(d.out, "%-18s %-16s → %s", r.agent, r.calls[i].Name, res.Verdict)
			switch res.Verdict {
			case "allowed":
				fmt.Fprintf(d.out, " (rule %s) — runs now\n", res.Rule)
			case "denied":
				fmt.Fprintf(d.out, " (rule %s): %s\n", res.Rule, res.Reason)
			case "pending":
				pending++
				fmt.Fprintf(d.out, " — waiting for a human: %s approvals approve %s\n", d.self, res.EventID)
			default:
				fmt.Fprintf(d.out, ": %s\n", res.Reason)
			}
		}
	}
	return pending, nil
}

// awaitDecided reviews the run again until no call is pending. Reviewing
// the same run and tool call ids again re-attaches to the same approvals;
// ?wait blocks until they are decided.
func (d *demo) awaitDecided(ctx context.Context, r demoRun) ([]reviewResult, error) {
	for {
		results, err := d.review(ctx, r, "?wait=60s")
		if err != nil {
			return nil, err
		}
		done := true
		for _, res := range results {
			if res.Verdict == "pending" {
				done = false
			}
		}
		if done {
			return results, nil
		}
	}
}

// execute prints the verdicts of the run's gated calls and claims and
// runs each allowed one. It reports false when ctx ended.
func (d *demo) execute(ctx context.Context, r demoRun, results []reviewResult) bool {
	out := d.out
	for i, res := range results {
		if res.EventID == "" {
			continue
		}
		fmt.Fprintf(out, "%-18s %-16s → %s", r.agent, r.calls[i].Name, res.Verdict)
		if res.Verdict == "allowed" {
			// Claim right before running: once, whatever retries it takes.
			err := d.retry(ctx, func() error {
				_, err := d.c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(res.EventID)+"/claim", map[string]any{"claim_id": d.claimID}, nil)
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
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
	return true
}

// fileDemoSession keeps the demo's session under the data directory.
const fileDemoSession = "demo-session"

// demoSession returns the demo's session: the one given, else the one kept
// in the data directory, else a new one ("new" always starts one). A
// session given or started is kept in the data directory when there is
// one; kept says whether it is.
func demoSession(dataDir, given string) (sess string, kept bool, err error) {
	path := filepath.Join(dataDir, fileDemoSession)
	switch given {
	case "":
		if b, err := os.ReadFile(path); err == nil {
			if s := strings.TrimSpace(string(b)); validSession(s) {
				return s, true, nil
			}
		}
		sess = uuid.NewString()[:8]
	case "new":
		sess = uuid.NewString()[:8]
	default:
		if !validSession(given) {
			return "", false, fmt.Errorf("demo: --session %q: want 1 to 32 characters of a-z, A-Z, 0-9, - and _", given)
		}
		sess = given
	}
	if st, err := os.Stat(dataDir); err == nil && st.IsDir() {
		if err := os.WriteFile(path, []byte(sess+"\n"), 0o600); err == nil {
			return sess, true, nil
		}
	}
	return sess, false, nil
}

func validSession(s string) bool {
	return len(s) <= 32 && contracts.ValidEventID(s)
}

// demo holds what the demo's requests share.
type demo struct {
	c   *client
	out io.Writer
	// claimID is this process's claim id: a claim it retries (the answer
	// was lost) succeeds again; another process's claim is refused.
	claimID string
	away    bool   // the server did not answer the last try
	self    string // how to invoke this binary in a hint (bin/countersign)
}

// invokedAs is how the user ran this binary, for commands a hint shows:
// the path they typed (bin/countersign), or countersign when it was found
// on $PATH.
func invokedAs() string {
	if a := os.Args[0]; strings.ContainsRune(a, os.PathSeparator) {
		return a
	}
	return "countersign"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Backoff of the demo's retries while the server is away.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 5 * time.Second
)

// retry runs call until it succeeds, fails for good, or ctx ends. While the
// server cannot be reached or answers 502, 503 or 504 (restarting, or NATS
// not up yet), it waits and tries again, the wait doubling up to retryMax:
// every request of the demo can be repeated safely, since reviews
// re-attach by id and claims carry the demo's claim id.
func (d *demo) retry(ctx context.Context, call func() error) error {
	wait := retryFirst
	for {
		err := call()
		if err == nil || !transient(err) {
			if err == nil && d.away {
				d.away = false
				fmt.Fprintf(d.out, "Countersign at %s answers again; the demo carries on.\n", d.c.url)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.away {
			d.away = true
			fmt.Fprintf(d.out, "Countersign at %s is not answering (%v); retrying until it is back (Ctrl-C stops the demo).\n", d.c.url, err)
		}
		t := time.NewTimer(wait + time.Duration(rand.Int64N(int64(wait/4))))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// transient reports whether err means the server is away for now: the
// connection failed or broke, or it answered 502, 503 or 504.
func transient(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status == 502 || ae.Status == 503 || ae.Status == 504
	}
	var he *httpStatusError
	if errors.As(err, &he) {
		return he.Status == 502 || he.Status == 503 || he.Status == 504
	}
	return false
}

// quietOnInterrupt ends the demo without an error when Ctrl-C stopped it.
func quietOnInterrupt(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

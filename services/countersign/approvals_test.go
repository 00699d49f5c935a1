package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const cliPolicy = `
version: "cli-1"
default: require_approval
rules:
  - name: questions
    tools: ["request_human_input"]
    action: require_approval
    approvers: [alice]
  - name: refunds
    tools: ["stripe.refund"]
    action: require_approval
    approvers: [alice]
    allowed_decisions: [approve, reject, edit, respond]
    grants: {scopes: [call, run], max_ttl: 2h}
  - name: wires
    tools: ["wire.send"]
    when: args.amount > 100
    action: require_approval
    approvers: [alice]
`

// cliStack is a real arbiter, gate and API on an embedded NATS server, and
// the flags that point the CLI at it as alice.
type cliStack struct {
	js         jetstream.JetStream
	arbJS      jetstream.JetStream // the arbiter's NATS user
	gate       *orchestrator.Gate
	url, token string
	flags      []string
	// adminFlags point the CLI at the stack as an admin.
	adminFlags []string
}

func newCLIStack(t *testing.T) *cliStack {
	t.Helper()
	return newCLIStackWith(t, nil)
}

// newCLIStackWith is newCLIStack with the API's configuration changed by
// edit.
func newCLIStackWith(t *testing.T, edit func(*api.Config)) *cliStack {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	apiJS := srv.JetStreamAs(embedded.RoleAPI)
	gate := countersigntest.Gate(t, apiJS, orchestrator.StaticPolicy{P: countersigntest.Policy(t, cliPolicy)})
	tok, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	adminTok, adminHash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := api.Config{JS: apiJS, Gate: gate, Registerer: reg, Gatherer: reg,
		Tokens: []api.Token{{Name: "alice", Subject: "alice", SHA256: hash, Roles: []string{api.RoleApprover, api.RoleAgent}},
			{Name: "root", Subject: "root", SHA256: adminHash, Roles: []string{api.RoleAdmin}}}}
	if edit != nil {
		edit(&cfg)
	}
	s, err := api.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &cliStack{js: js, arbJS: srv.JetStreamAs(embedded.RoleArbiter), gate: gate, url: hs.URL, token: tok, flags: []string{"--url", hs.URL, "--token", tok},
		adminFlags: []string{"--url", hs.URL, "--token", adminTok}}
}

// cli runs the countersign command with args and the stack's flags.
func (c *cliStack) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(append(args, c.flags...), &out, &errOut)
	return out.String() + errOut.String(), err
}

// admin runs the countersign command with args as the stack's admin.
func (c *cliStack) admin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(append(args, c.adminFlags...), &out, &errOut)
	return out.String() + errOut.String(), err
}

func (c *cliStack) submit(t *testing.T, call orchestrator.ToolCall) string {
	t.Helper()
	v, err := c.gate.Submit(context.Background(), contracts.Run{ID: "run-cli", Agent: "billing-bot"}, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	c.waitRecord(t, v[0].EventID)
	return v[0].EventID
}

// waitRecord waits until the arbiter created the record of id.
func (c *cliStack) waitRecord(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ready := make(chan struct{})
	stop, err := c.gate.Waiter().Watch(ctx, id, func(*contracts.Record, uint64) bool { close(ready); return true })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatalf("record %s never appeared", id)
	}
}

func TestCLIEditShowsTheDiff(t *testing.T) {
	c := newCLIStack(t)
	id := c.submit(t, orchestrator.ToolCall{ID: "r1", Name: "stripe.refund",
		Arguments: json.RawMessage(`{"amount":100,"currency":"eur","reason":"duplicate"}`),
		Schema:    json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","maximum":1000}}}`)})

	out, err := c.cli(t, "approvals", "edit", id, "--json", `{"amount":5000,"currency":"eur"}`)
	if err == nil || !strings.Contains(err.Error(), "invalid_arguments") || !strings.Contains(err.Error(), "arguments/amount") {
		t.Fatalf("an edit over the schema's maximum: %v\n%s", err, out)
	}

	file := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(file, []byte(`{"amount": 80, "currency": "eur"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = c.cli(t, "approvals", "edit", id, "--args", file, "--comment", "partial refund")
	if err != nil {
		t.Fatalf("edit: %v\n%s", err, out)
	}
	for _, want := range []string{"Status is now approved", "replace /amount = 80", "remove  /reason"} {
		if !strings.Contains(out, want) {
			t.Errorf("edit output lacks %q:\n%s", want, out)
		}
	}
	out, err = c.cli(t, "approvals", "show", id)
	if err != nil || !strings.Contains(out, "Changes:") || !strings.Contains(out, `"amount":80`) {
		t.Errorf("show after the edit: %v\n%s", err, out)
	}
}

func TestCLIRespondAnswerExtend(t *testing.T) {
	c := newCLIStack(t)
	id := c.submit(t, orchestrator.ToolCall{ID: "r2", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":1}`)})

	out, err := c.cli(t, "approvals", "extend", id, "2h")
	if err != nil || !strings.Contains(out, "now expires at") {
		t.Fatalf("extend: %v\n%s", err, out)
	}
	if _, err := c.cli(t, "approvals", "extend", id, "soon"); err == nil {
		t.Fatal("extend by an invalid duration was accepted")
	}
	out, err = c.cli(t, "approvals", "respond", id, "Use a voucher instead.")
	if err != nil || !strings.Contains(out, "Status is now responded") {
		t.Fatalf("respond: %v\n%s", err, out)
	}
	if _, err := c.cli(t, "approvals", "respond", id); err == nil {
		t.Fatal("respond without text was accepted")
	}

	run := contracts.Run{ID: "run-cli", Agent: "billing-bot"}
	q, err := c.gate.SubmitQuestion(context.Background(), run, orchestrator.Question{ID: "q1", Text: "Which cost centre?",
		Schema: json.RawMessage(`{"type":"object","required":["cc"],"properties":{"cc":{"type":"string","pattern":"^CC-[0-9]+$"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	c.waitRecord(t, q.EventID)
	if out, err := c.cli(t, "approvals", "answer", q.EventID, "--json", `{"cc":"nope"}`); err == nil || !strings.Contains(err.Error(), "answer/content/cc") {
		t.Fatalf("an answer that fails the schema: %v\n%s", err, out)
	}
	if _, err := c.cli(t, "approvals", "answer", q.EventID, "--decline", "--json", `{}`); err == nil {
		t.Fatal("--decline with --json was accepted")
	}
	out, err = c.cli(t, "approvals", "answer", q.EventID, "--json", `{"cc":"CC-200"}`)
	if err != nil || !strings.Contains(out, "Status is now answered") {
		t.Fatalf("answer: %v\n%s", err, out)
	}
	a, err := c.gate.Ask(context.Background(), run, orchestrator.Question{ID: "q1", Text: "Which cost centre?"})
	if err != nil || a.Action != orchestrator.ActionAccept || string(a.Content) != `{"cc":"CC-200"}` {
		t.Fatalf("the agent's answer: %+v, %v", a, err)
	}

	q2, err := c.gate.SubmitQuestion(context.Background(), run, orchestrator.Question{ID: "q2", Text: "Go ahead?"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitRecord(t, q2.EventID)
	out, err = c.cli(t, "approvals", "answer", q2.EventID, "--cancel")
	if err != nil || !strings.Contains(out, "Status is now answered") {
		t.Fatalf("answer --cancel: %v\n%s", err, out)
	}
}

// Approval ids may be shortened to a unique prefix of at least four
// characters, as git takes commit ids; an ambiguous prefix lists the
// candidates, a short one is refused.
func TestCLIAcceptsAUniqueIDPrefix(t *testing.T) {
	c := newCLIStack(t)
	run := contracts.Run{ID: "run-cli", Agent: "billing-bot"}
	// Two tool calls whose event ids share their first five characters.
	byPrefix := map[string]string{}
	var first, second string
	for i := 0; second == ""; i++ {
		callID := "p" + strconv.Itoa(i)
		id := orchestrator.EventID(run, callID)
		if other, ok := byPrefix[id[:5]]; ok {
			first, second = other, callID
			break
		}
		byPrefix[id[:5]] = callID
	}
	idA := c.submit(t, orchestrator.ToolCall{ID: first, Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":1}`)})
	idB := c.submit(t, orchestrator.ToolCall{ID: second, Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":2}`)})
	unique := func(id, other string) string {
		n := 5
		for id[:n] == other[:n] {
			n++
		}
		return id[:n+1]
	}

	out, err := c.cli(t, "approvals", "show", unique(idA, idB))
	if err != nil || !strings.Contains(out, "Approval "+idA) {
		t.Fatalf("show by a unique prefix: %v\n%s", err, out)
	}
	out, err = c.cli(t, "approvals", "reject", unique(idB, idA), "--reason", "no")
	if err != nil || !strings.Contains(out, "Vote counted: reject "+idB) {
		t.Fatalf("reject by a unique prefix: %v\n%s", err, out)
	}
	out, err = c.cli(t, "audit", unique(idB, idA))
	if err != nil || !strings.Contains(out, idB) {
		t.Fatalf("audit by a unique prefix: %v\n%s", err, out)
	}

	_, err = c.cli(t, "approvals", "approve", idA[:5])
	if !errors.Is(err, ErrAmbiguousID) || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), idB) {
		t.Fatalf("an ambiguous prefix: %v", err)
	}
	if _, err := c.cli(t, "approvals", "show", idA[:3]); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("a three-character prefix: %v", err)
	}
	if _, err := c.cli(t, "approvals", "show", "ffff0000"); err == nil || !strings.Contains(err.Error(), "no approval id starts with") {
		t.Fatalf("a prefix of nothing: %v", err)
	}
	out, err = c.cli(t, "approvals", "show", idA, "--json")
	var ans recordAnswer
	if err != nil || json.Unmarshal([]byte(out), &ans) != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	if rec := ans.Record; rec.Status != contracts.StatusPending || len(rec.Votes)+len(rec.RefusedVotes) != 0 {
		t.Fatalf("the ambiguous approve voted: %+v", rec)
	}
}

// approvals show prints the request's policy error, the KV revision as what
// it is (the bucket's sequence of the record's last write, as the API
// returns it beside the record) and the claim as far as Countersign knows it.
func TestCLIShowPolicyErrorRevisionAndClaim(t *testing.T) {
	c := newCLIStack(t)
	id := c.submit(t, orchestrator.ToolCall{ID: "w1", Name: "wire.send", Arguments: json.RawMessage(`{"amount":"250"}`)})
	out, err := c.cli(t, "approvals", "show", id, "--json")
	var ans recordAnswer
	if err != nil || json.Unmarshal([]byte(out), &ans) != nil || ans.Revision == 0 {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	out, err = c.cli(t, "approvals", "show", id)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`Policy error: args.amount is a string ("250"), the condition compares it with a number (100) using >`,
		fmt.Sprintf("Revision:  %d (hitl_approvals KV revision of the last write; bucket-wide, not a count of this record's changes)", ans.Revision),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(revision") {
		t.Errorf("show still calls the KV revision the record's revision:\n%s", out)
	}

	if out, err := c.cli(t, "approvals", "approve", id); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	// A library gate's request is claimed by its agent or an admin; alice,
	// who approved it, may not.
	for _, try := range []struct {
		token string
		want  int
	}{{c.token, http.StatusForbidden}, {c.adminFlags[3], http.StatusOK}} {
		req, _ := http.NewRequest("POST", c.url+"/v1/approvals/"+id+"/claim", strings.NewReader(`{"claim_id":"claim-7"}`))
		req.Header.Set("Authorization", "Bearer "+try.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != try.want {
			t.Fatalf("claim: %d, want %d", resp.StatusCode, try.want)
		}
	}
	out, err = c.cli(t, "approvals", "show", id)
	if err != nil || !strings.Contains(out, "by claim claim-7; the outcome of the tool call is unknown to Countersign") || strings.Contains(out, "Executed") {
		t.Fatalf("show after the claim: %v\n%s", err, out)
	}
}

// TestCLIBatchRunOfFifty approves the 50 pending calls of a run in one
// command: the one alice requested herself is refused (self_approval) and
// reported, the other 49 count.
func TestCLIBatchRunOfFifty(t *testing.T) {
	c := newCLIStack(t)
	ctx := context.Background()
	run := contracts.Run{ID: "run-50", Agent: "billing-bot"}
	var calls []orchestrator.ToolCall
	for i := range 49 {
		calls = append(calls, orchestrator.ToolCall{ID: fmt.Sprintf("r%d", i), Name: "stripe.refund", Arguments: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, i+1))})
	}
	v, err := c.gate.Submit(ctx, run, calls)
	if err != nil {
		t.Fatal(err)
	}
	mine := run
	mine.RequestedBy = "alice"
	vs, err := c.gate.Submit(ctx, mine, []orchestrator.ToolCall{{ID: "r49", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":50}`)}})
	if err != nil {
		t.Fatal(err)
	}
	self := vs[0].EventID
	for _, x := range append(v, vs...) {
		c.waitRecord(t, x.EventID)
	}

	out, err := c.cli(t, "approvals", "approve", "--run", "run-50", "--comment", "all of them")
	if err == nil || !strings.Contains(err.Error(), "1 of 50 votes were not counted") {
		t.Fatalf("approve --run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "49 counted, 1 refused, 0 in flight.") || !regexp.MustCompile(self+`\s+refused\s+self_approval`).MatchString(out) {
		t.Fatalf("approve --run output:\n%s", out)
	}
	if n := strings.Count(out, " counted  "); n != 49 {
		t.Errorf("%d lines counted, want 49:\n%s", n, out)
	}
	out, err = c.cli(t, "approvals", "ls", "--run", "run-50", "--status", "approved", "--limit", "100", "--json")
	var ls listAnswer
	if err != nil || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Items) != 49 {
		t.Fatalf("approved calls of the run: %v (%d)\n%s", err, len(ls.Items), out)
	}
	for _, it := range ls.Items {
		if it.Record.Request.EventID == self || it.Record.Votes[0].Comment != "all of them" || it.Record.Votes[0].Approver.Via != "cli" {
			t.Fatalf("approved %+v", it.Record)
		}
	}
	// Nothing is left for alice to decide: the self-requested call waits for someone else.
	if out, err := c.cli(t, "approvals", "approve", "--run", "run-50"); err == nil || !strings.Contains(out, "0 counted, 1 refused") {
		t.Fatalf("approve --run again: %v\n%s", err, out)
	}
}

func TestCLIBatchSelection(t *testing.T) {
	c := newCLIStack(t)
	a := c.submit(t, orchestrator.ToolCall{ID: "s1", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":1}`)})
	b := c.submit(t, orchestrator.ToolCall{ID: "s2", Name: "stripe.refund", Arguments: json.RawMessage(`{"amount":2}`)})
	out, err := c.cli(t, "approvals", "reject", a, b[:8], "--reason", "duplicates")
	if err != nil || !strings.Contains(out, "2 counted, 0 refused") || strings.Count(out, "rejected") != 2 {
		t.Fatalf("reject two: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{"approvals", "approve", a, "--run", "r"}, {"approvals", "approve"}, {"approvals", "approve", a, "--agent", "x"}} {
		if out, err := c.cli(t, bad...); err == nil {
			t.Errorf("%v: no error\n%s", bad, out)
		}
	}
}

// approvals ls follows the listing into older history: the API may answer
// a page of it short (it bounds how much history one page looks
// through), and the CLI goes on until it has what was asked for.
func TestCLIListsOlderHistory(t *testing.T) {
	// Each page of older history stops after the 5,120 headers of its
	// first two ranges: the three records of run-old, under 9,000 newer
	// ones, come back on the second page, after an empty first one.
	c := newCLIStackWith(t, func(cfg *api.Config) { cfg.IndexRecent, cfg.HistoryPageBudget = 10, time.Nanosecond })
	ctx := context.Background()
	w := events.NewRecordWriter(c.arbJS)
	write := func(run string) string {
		req := contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(),
			Kind: contracts.KindToolApproval, Run: contracts.Run{ID: run, Agent: "billing-bot"}, CreatedAt: time.Now()}
		rec := approval.NewRecord(req, time.Now())
		rec.Status = contracts.StatusApproved
		data, err := contracts.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Create(ctx, req.EventID, data, &rec); err != nil {
			t.Fatal(err)
		}
		return req.EventID
	}
	var old []string
	for range 3 {
		old = append(old, write("run-old"))
	}
	for range 9000 {
		write("run-busy")
	}
	out, err := c.admin(t, "approvals", "ls", "--status", "approved", "--run", "run-old")
	if err != nil {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	for _, id := range old {
		if !strings.Contains(out, id) {
			t.Errorf("ls lacks %s:\n%s", id, out)
		}
	}
	out, err = c.admin(t, "approvals", "ls", "--status", "approved", "--limit", "40", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ans listAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Items) != 40 {
		t.Errorf("ls --limit 40 listed %d (%v)", len(ans.Items), err)
	}
}

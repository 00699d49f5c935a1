package test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// pendingMCPCall submits a call that the shipped policy's mcp-destructive
// rule holds (the rule that allows edit and respond besides approve and
// reject), with the payment's arguments and, when schema is not nil, its
// JSON Schema.
func pendingMCPCall(t *testing.T, p *serveProc, runID string, schema any) string {
	t.Helper()
	call := map[string]any{"id": "call-1", "name": "payments_send",
		"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}}
	if schema != nil {
		call["tool_schema"] = schema
	}
	r := reviewOne(t, p, map[string]any{"id": runID, "agent": "mcp", "requested_by": "carol",
		"labels": map[string]string{"mcp.destructiveHint": "true"}}, call)
	if r["verdict"] != "pending" || r["rule"] != "mcp-destructive" {
		t.Fatalf("%s: %v, want pending under the mcp-destructive rule", runID, r)
	}
	return r["event_id"].(string)
}

// TestDecisionsExamplesRun runs docs/decisions.md's examples as written
// under deploy/policy.yaml: every decision of the CLI, the edit the tool's
// schema refuses, a standing grant, the batch votes of the CLI and of
// POST /v1/votes, a question over HTTP answered from the CLI, and the Go
// question of a model's request_human_input call.
func TestDecisionsExamplesRun(t *testing.T) {
	d := readDocExamples(t, "docs/decisions.md", "")
	goExamplesProgram(t)
	p, addr := makeRunServe(t)
	sh := newDocShell(t, p, addr)
	ch := followChanges(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The question the CLI's answer line answers, asked over HTTP.
	question := d.take(t, "sh", "/v1/questions?wait=60s").shell(t)
	if len(question) != 1 {
		t.Fatalf("want one curl asking a question, got %q", question)
	}
	asked := make(chan httpAnswer, 1)
	go func() { asked <- sh.curl(ctx, t, question[0]) }()
	questionID := pendingOf(t, p, ch, "run-1", 1)[0]

	// Every decision from the CLI.
	votes := d.take(t, "sh", "approvals approve $ID", "approvals extend").shell(t)
	for i, cmd := range votes {
		line := strings.Join(cmd, " ")
		var want, status string
		switch {
		case strings.Contains(line, "approvals approve"):
			sh.vars["ID"] = pendingPayment(t, p, "run-vote-"+cmd[2], "call-1")
			want, status = "Vote counted: approve", "approved"
		case strings.Contains(line, "approvals reject"):
			sh.vars["ID"] = pendingPayment(t, p, "run-vote-"+cmd[2], "call-1")
			want, status = "Vote counted: reject", "rejected"
		case strings.Contains(line, "approvals edit"):
			sh.vars["ID"] = pendingMCPCall(t, p, "run-vote-edit", nil)
			want, status = "Vote counted: edit", "approved"
		case strings.Contains(line, "approvals respond"):
			sh.vars["ID"] = pendingMCPCall(t, p, "run-vote-respond", nil)
			want, status = "Vote counted: respond", "responded"
		case strings.Contains(line, "approvals answer"):
			sh.vars["ID"] = questionID
			want, status = "Vote counted: answer", "answered"
		case strings.Contains(line, "approvals extend"):
			sh.vars["ID"] = pendingPayment(t, p, "run-vote-extend", "call-1")
			want, status = "", "pending"
		default:
			t.Fatalf("docs/decisions.md: %q: a command this test does not know", line)
		}
		before := p.record(t, sh.vars["ID"])
		out := sh.run(t, cmd)
		if !strings.Contains(out, want) {
			t.Errorf("command %d, %q: does not say %q:\n%s", i+1, line, want, out)
		}
		if status == "pending" {
			if after := p.record(t, sh.vars["ID"]); after.Status != status || !after.ExpiresAt.Equal(before.ExpiresAt.Add(2*time.Hour)) {
				t.Errorf("%q: the approval is %s, expiring at %s; want pending, 2h later than %s", line, after.Status, after.ExpiresAt, before.ExpiresAt)
			}
		} else if got := p.status(t, sh.vars["ID"]); got != status {
			t.Errorf("%q: the approval is %s, want %s", line, got, status)
		}
	}
	if len(votes) != 6 {
		t.Errorf("docs/decisions.md's CLI decisions are %d commands; this test knows 6", len(votes))
	}
	// The decision the rule does not allow: the payments rule allows approve
	// and reject only.
	var refusal struct {
		Error struct{ Code, Field, Message string } `json:"error"`
	}
	if code := p.call("POST", "/v1/approvals/"+pendingPayment(t, p, "run-edit-refused", "call-1")+"/votes",
		map[string]any{"decision": "edit", "arguments": map[string]any{"amount": 800}}, &refusal); code != http.StatusForbidden || refusal.Error.Code != "decision_not_allowed" {
		t.Errorf("an edit under the payments rule: %d %+v, want 403 decision_not_allowed", code, refusal.Error)
	}

	// The question's answer, as shown.
	a := <-asked
	var shownAnswer, gotAnswer map[string]any
	if err := json.Unmarshal([]byte(d.take(t, "json", `"status": "answered"`).text), &shownAnswer); err != nil {
		t.Fatal(err)
	}
	a.decode(t, &gotAnswer)
	if miss := hasShape(shownAnswer, gotAnswer); miss != "" || gotAnswer["status"] != "answered" ||
		!jsonEqual(gotAnswer["answer"].(map[string]any)["content"], shownAnswer["answer"].(map[string]any)["content"]) {
		t.Errorf("the question answered %s; docs/decisions.md shows %v (missing %q)", a.body, shownAnswer, miss)
	}

	// An edit the tool's schema refuses, as shown.
	var shownErr struct {
		Error struct{ Code, Field, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(d.take(t, "json", `"invalid_arguments"`).text), &shownErr); err != nil {
		t.Fatal(err)
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number", "maximum": 1000}}}
	id := pendingMCPCall(t, p, "run-edit-schema", schema)
	var gotErr = shownErr
	gotErr.Error.Code, gotErr.Error.Field, gotErr.Error.Message = "", "", ""
	if code := p.call("POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "edit",
		"arguments": map[string]any{"amount": 5000, "currency": "EUR", "recipient": "Globex GmbH"}}, &gotErr); code != http.StatusBadRequest || gotErr != shownErr {
		t.Errorf("an edit over the schema's maximum: %d %+v, docs/decisions.md shows 400 %+v", code, gotErr.Error, shownErr.Error)
	}

	// A standing grant: approved for the rest of the run, listed, revoked.
	grants := d.take(t, "sh", "approvals approve $ID --grant run --ttl 1h").shell(t)
	sh.vars["ID"] = pendingPayment(t, p, "run-grant", "call-1")
	for i, want := range []string{"Vote counted: approve", sh.vars["ID"][:8], "revoked"} {
		if i == 2 {
			waitGrant(t, p, sh.vars["ID"])
		}
		if out := sh.run(t, grants[i]); !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
			t.Errorf("%q does not say %q:\n%s", grants[i], want, out)
		}
	}

	// Batch decisions from the CLI: a selection, then every pending call of
	// run-7, approved and rejected.
	batch := d.take(t, "sh", "approvals approve $ID1 $ID2 $ID3").shell(t)
	var selection []string
	for i := 1; i <= 3; i++ {
		id := pendingPayment(t, p, "run-selection", "call-"+string(rune('0'+i)))
		sh.vars["ID"+string(rune('0'+i))] = id
		selection = append(selection, id)
	}
	sh.run(t, batch[0])
	for _, id := range selection {
		if st := p.status(t, id); st != "approved" {
			t.Errorf("%q: %s is %s, want approved", batch[0], id, st)
		}
	}
	for i, want := range []string{"approved", "rejected"} {
		run7 := []string{pendingPayment(t, p, "run-7", "call-a"+want), pendingPayment(t, p, "run-7", "call-b"+want)}
		sh.run(t, batch[1+i])
		for _, id := range run7 {
			if st := p.status(t, id); st != want {
				t.Errorf("%q: %s is %s, want %s", batch[1+i], id, st, want)
			}
		}
	}

	// POST /v1/votes: a selection (one vote counted, one refused: its
	// approval is closed), and a run; the answer as shown.
	sel := d.take(t, "json", `{"votes": [`).text
	open := pendingPayment(t, p, "run-votes", "call-1")
	sel = strings.Replace(sel, "…", open, 1)
	sel = strings.Replace(sel, "…", selection[0], 1)
	var answer map[string]any
	if code := p.call("POST", "/v1/votes", json.RawMessage(sel), &answer); code != http.StatusOK {
		t.Fatalf("POST /v1/votes %s: %d %v", sel, code, answer)
	}
	var shown map[string]any
	if err := json.Unmarshal([]byte(d.take(t, "json", `"results": [`).text), &shown); err != nil {
		t.Fatal(err)
	}
	results, _ := answer["results"].([]any)
	shownResults := shown["results"].([]any)
	if len(results) != 2 || answer["counted"] != 1.0 || answer["refused"] != 1.0 {
		t.Fatalf("POST /v1/votes: %v, want one vote counted and one refused", answer)
	}
	for i := range shownResults {
		if miss := hasShape(shownResults[i], results[i]); miss != "" {
			t.Errorf("result %d has no %s: %v", i, miss, results[i])
		}
	}
	for k := range shown {
		if _, ok := answer[k]; !ok {
			t.Errorf("the answer has no %s: %v", k, answer)
		}
	}
	run7 := []string{pendingPayment(t, p, "run-7", "call-c"), pendingPayment(t, p, "run-7", "call-d")}
	body := d.take(t, "json", `{"run_id": "run-7"`).text
	if code := p.call("POST", "/v1/votes", json.RawMessage(body), &answer); code != http.StatusOK || answer["counted"] != 2.0 {
		t.Errorf("POST /v1/votes %s: %d %v, want both pending calls of run-7 counted", body, code, answer)
	}
	for _, id := range run7 {
		if st := p.status(t, id); st != "approved" {
			t.Errorf("%s: %s is %s, want approved", body, id, st)
		}
	}

	// The Go question of a model's request_human_input call.
	d.take(t, "go", "gate.Ask(")
	cmd := runGoExample(t, "goAsk", goExampleNATS(t, p)...)
	cmd.Env = append(cmd.Env, "EX_RUN_ID=run-ask", "EX_CALL_ID=call-7",
		`EX_ARGS={"question": "Which city should I book for the offsite?"}`)
	done := make(chan []string, 1)
	go func() { out, err := cmd.CombinedOutput(); done <- outputLines(t, out, err) }()
	askID := pendingOf(t, p, ch, "run-ask", 1)[0]
	sh.run(t, []string{"bin/countersign", "approvals", "answer", askID, "--text", "Lisbon"})
	if got := <-done; len(got) != 2 || got[0] != `reply call-7 {"text":"Lisbon"}` || got[1] != "tools request_human_input" {
		t.Errorf("the Go example printed %s, want the answer handed back as call-7's result", fmtLines(got))
	}
	d.allRun(t)
}

// goExampleNATS is the environment that connects the Go examples to p's
// NATS server as the orchestrator's user.
func goExampleNATS(t *testing.T, p *serveProc) []string {
	t.Helper()
	u := roleUsers(t, p.data)["orchestrator"]
	return []string{"EX_NATS_URL=" + readResolver(t, p).URL, "EX_NATS_USER=" + u.Name, "EX_NATS_PASSWORD=" + u.Password}
}

// waitGrant returns once the grant an approval issued is stored: the
// arbiter stores it a moment after the decision, and nothing announces it
// on GET /v1/events, so the grant is read until it is there.
func waitGrant(t *testing.T, p *serveProc, id string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for p.call("GET", "/v1/grants/"+id, nil, nil) != http.StatusOK {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the grant of approval %s was never stored", id)
		}
	}
}

// record reads an approval's record as it is now.
func (p *serveProc) record(t *testing.T, id string) contracts.Record {
	t.Helper()
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	if code := p.call("GET", "/v1/approvals/"+id, nil, &rec); code != http.StatusOK {
		t.Fatalf("approval %s: %d", id, code)
	}
	return rec.Record
}

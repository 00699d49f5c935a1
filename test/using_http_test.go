package test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestUsingHTTPExamplesRun runs docs/using.md's HTTP examples as written,
// against a server started as make run starts it (deploy/policy.yaml): the
// vote that rejects, the approval that grants the rest of the run and the
// revocation of that grant, and the batch vote on a run's pending calls.
func TestUsingHTTPExamplesRun(t *testing.T) {
	src, err := os.ReadFile("../docs/using.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start := strings.Index(text, "\n# HTTP\n")
	end := strings.Index(text[start+1:], "\n# ")
	if start < 0 || end < 0 {
		t.Fatal("docs/using.md has no `# HTTP` section")
	}
	var blocks [][][]string
	for _, m := range fencedBlock.FindAllStringSubmatch(text[start:start+1+end], -1) {
		if m[1] != "sh" {
			continue
		}
		cmds, err := shellWords(m[2])
		if err != nil {
			t.Fatalf("docs/using.md: %v:\n%s", err, m[2])
		}
		blocks = append(blocks, cmds)
	}
	if len(blocks) != 3 {
		t.Fatalf("docs/using.md's HTTP section has %d sh blocks; this test runs 3 (reject, grant and revoke, batch)", len(blocks))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	flags, addr := makeRun(t)
	p := startServeBinary(t, binary, t.TempDir(), flags...)
	sh := &quickShell{p: p, base: "http://" + addr, token: p.token}
	// run-7: four payments pending under the payments rule.
	var ans struct {
		Results []map[string]any `json:"results"`
	}
	calls := []map[string]any{}
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		calls = append(calls, map[string]any{"id": id, "name": "payments_send",
			"arguments": map[string]any{"amount": 40, "currency": "EUR", "recipient": "Cafe " + id}})
	}
	if code := p.call("POST", "/v1/reviews", map[string]any{
		"run": map[string]any{"id": "run-7", "agent": "billing-bot", "requested_by": "carol"}, "tool_calls": calls}, &ans); code != http.StatusOK || len(ans.Results) != 4 {
		t.Fatalf("review: %d %v", code, ans.Results)
	}
	ids := map[string]string{}
	for _, r := range ans.Results {
		if r["verdict"] != "pending" || r["rule"] != "payments" {
			t.Fatalf("%v: want pending under the payments rule", r)
		}
		ids[r["tool_call_id"].(string)], _ = r["event_id"].(string)
	}
	run := func(cmd []string, event string, want ...int) {
		t.Helper()
		for i, w := range cmd {
			cmd[i] = strings.ReplaceAll(strings.ReplaceAll(w, "<event_id>", event), "<grant_id>", event)
		}
		a := sh.curl(ctx, t, cmd)
		for _, w := range want {
			if a.status == w {
				return
			}
		}
		t.Fatalf("%q: %d %s, want %v", cmd, a.status, a.body, want)
	}
	// The rejection, on c1.
	run(blocks[0][0], ids["c1"], http.StatusOK)
	// The approval that grants the rest of the run, on c2, and its revocation.
	run(blocks[1][0], ids["c2"], http.StatusOK)
	// The arbiter stores the grant a moment after the decision; a reader
	// revokes it later than that.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for p.call("GET", "/v1/grants/"+ids["c2"], nil, nil) != http.StatusOK {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the grant of the approval was never stored")
		}
	}
	run(blocks[1][1], ids["c2"], http.StatusOK, http.StatusAccepted)
	// The batch: every pending call of run-7 (c3 and c4).
	run(blocks[2][0], "", http.StatusOK)
	for id, want := range map[string]string{"c1": "rejected", "c2": "approved", "c3": "approved", "c4": "approved"} {
		var rec struct {
			Record struct{ Status string } `json:"record"`
		}
		if code := p.call("GET", "/v1/approvals/"+ids[id]+"?wait=10s", nil, &rec); code != http.StatusOK || rec.Record.Status != want {
			t.Errorf("%s: %d %s, want %s", id, code, rec.Record.Status, want)
		}
	}
}

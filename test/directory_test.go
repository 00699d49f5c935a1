package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

const directoryPolicy = `version: "dir-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: ["group:finance"]
  - name: deploys
    tools: ["deploy"]
    action: require_approval
    approvers: ["group:legal"]
`

// person is a directory user with a fresh bearer token.
type person struct{ id, group, token string }

func newPerson(id, group string) person {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return person{id: id, group: group, token: "cs_" + hex.EncodeToString(b)}
}

func writeDirectory(t *testing.T, path string, people ...person) {
	t.Helper()
	var b strings.Builder
	b.WriteString("users:\n")
	for _, p := range people {
		sum := sha256.Sum256([]byte(p.token))
		fmt.Fprintf(&b, "  - id: %s\n    groups: [%s]\n    tokens: [{sha256: %s, roles: [approver]}]\n", p.id, p.group, hex.EncodeToString(sum[:]))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// callAs sends a JSON request with the given bearer token.
func (p *serveProc) callAs(token, method, path string, body, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			p.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}

// TestServeDirectory runs serve with an approver directory: groups resolve
// to its members when a request is created, directory tokens vote as their
// user, a user outside the group is refused, and a SIGHUP reloads the file
// without touching pending requests.
func TestServeDirectory(t *testing.T) {
	dir := t.TempDir()
	dirFile, polFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "policy.yaml")
	alice, bob, carol := newPerson("alice", "finance"), newPerson("bob", "finance"), newPerson("carol", "treasury")
	writeDirectory(t, dirFile, alice, bob, carol)
	if err := os.WriteFile(polFile, []byte(directoryPolicy), 0o600); err != nil {
		t.Fatal(err)
	}

	// Lint: finance is the directory's; legal is nobody's.
	lint := func(args ...string) string {
		out, _ := exec.Command(binary, append([]string{"policy", "lint"}, args...)...).CombinedOutput()
		return string(out)
	}
	if out := lint(polFile); !strings.Contains(out, `"finance"`) || !strings.Contains(out, `"legal"`) {
		t.Fatalf("lint without the directory:\n%s", out)
	}
	if out := lint("--directory", dirFile, polFile); strings.Contains(out, `"finance"`) || !strings.Contains(out, `unknown approver group "legal"`) || !strings.Contains(out, "ok") {
		t.Fatalf("lint with the directory:\n%s", out)
	}

	p := startServe(t, t.TempDir(), "--policy", polFile, "--directory", dirFile)
	// Against the running server, lint and apply know the groups of its
	// directory: only legal is unknown.
	for _, args := range [][]string{{"policy", "lint", polFile}, {"policy", "apply", "--dry-run", polFile}} {
		out, err := p.cli(args...)
		if err != nil || strings.Contains(out, `"finance"`) || !strings.Contains(out, `unknown approver group "legal"`) {
			t.Fatalf("%v against the server: %v\n%s", args, err, out)
		}
	}
	var ans reviewAnswer
	body := map[string]any{
		"run":        map[string]any{"id": "run-dir", "agent": "billing-bot"},
		"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send", "arguments": map[string]any{"amount": 10}}},
	}
	if code := p.call("POST", "/v1/reviews", body, &ans); code != 200 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	p.callAs(alice.token, "GET", "/v1/approvals/"+id, nil, &rec)
	if got := rec.Record.Request.Quorum.Approvers; len(got) != 2 || got[0] != "alice" || got[1] != "bob" {
		t.Fatalf("approvers %v, want [alice bob]", got)
	}
	var refused struct {
		Error struct{ Code string } `json:"error"`
	}
	// carol is not in finance: the request is not hers to decide, nor to
	// read, so it answers as one that does not exist.
	if code := p.callAs(carol.token, "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, &refused); code != 404 || refused.Error.Code != contracts.ReasonUnknownEvent {
		t.Fatalf("carol's vote: %d %+v", code, refused)
	}

	// Erin joins finance; serve reloads on SIGHUP. Her token works at once,
	// but the pending request keeps the approvers it was created with.
	erin := newPerson("erin", "finance")
	writeDirectory(t, dirFile, alice, bob, carol, erin)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reload happens inside the other process, which gives no signal a
	// test can wait on; her token starting to work is the observable effect.
	deadline := time.Now().Add(20 * time.Second)
	for p.callAs(erin.token, "GET", "/v1/approvals", nil, nil) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("erin's token never authenticated after SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Not one of its frozen approvers, she neither decides nor reads it.
	if code := p.callAs(erin.token, "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, &refused); code != 404 || refused.Error.Code != contracts.ReasonUnknownEvent {
		t.Fatalf("erin's vote on a request frozen before she joined: %d %+v", code, refused)
	}
	if code := p.callAs(alice.token, "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, &rec); code != 200 ||
		rec.Record.Status != contracts.StatusApproved || rec.Record.Votes[0].Approver.ID != "alice" {
		t.Fatalf("alice's vote: %d %+v", code, rec.Record)
	}
}

package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/services/api"
)

// previousReleases are releases before the current line of work: a
// data directory it wrote must be served by the binary under test. Add the
// next release here when one lands; keep the older ones.
var previousReleases = []string{
	"70cc8ed", // 2026-11-23: inbox sessions in hitl_sessions, one live feed per process
	"b8dc2a3", // 2026-12-06: audit entries stored one by one on hitl.audit.entry.<event_id>
	"ba0a339", // 2026-12-07: the policy, passkeys and push buckets keep each key's history
}

// auditedReleases stored audit entries one by one: those must verify in
// one chain with the batches the release under test appends (every
// release's log must verify).
var auditedReleases = map[string]bool{"b8dc2a3": true}

// buildRelease builds countersign as it was at commit rev, from this
// repository's own history, into dir.
func buildRelease(t *testing.T, rev, dir string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the upgrade test builds earlier releases from this repository's git history; git rev-parse: %v", err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", strings.TrimSpace(string(root)), "archive", "--format=tar", rev,
		"go.mod", "go.sum", "contracts", "events", "orchestrator", "notifier", "services")
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr bytes.Buffer
	archive.Stderr = &archErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (is the clone shallow? the upgrade test needs the release's commit): %v %s", rev, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "countersign-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./services/countersign")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build release %s: %v\n%s", rev, err, out)
	}
	return bin
}

const upgradePolicyV1 = `version: "upgrade-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
    timeout: 24h
    approvers: ["group:finance"]
    summary: "Pay {{args.amount}} EUR to {{args.recipient}}"
`

// upgradePolicyV2 is applied live before the upgrade: the live policy
// differs from the file serve was started with.
var upgradePolicyV2 = strings.Replace(upgradePolicyV1, `"upgrade-1"`, `"upgrade-2"`, 1) + `  - name: lookups
    tools: ["search_*"]
    action: allow
`

// A data directory written by an earlier release is served by this one:
// its pending approvals can be decided (by the approvers their snapshots
// froze, whatever the directory says now), a run waiting on one resumes,
// an approval decided before the upgrade can be claimed once, the live
// policy applied through the API stays live, and an inbox session stays
// signed in.
func TestUpgradeFromEarlierRelease(t *testing.T) {
	for _, rev := range previousReleases {
		t.Run(rev, func(t *testing.T) { testUpgradeFrom(t, rev) })
	}
}

func testUpgradeFrom(t *testing.T, rev string) {
	work := t.TempDir()
	old := buildRelease(t, rev, work)
	data := filepath.Join(work, "data")

	tokens, hashes := map[string]string{}, map[string]string{}
	user := func(id string, groups string) string {
		if tokens[id] == "" {
			tok, hash, err := api.NewToken()
			if err != nil {
				t.Fatal(err)
			}
			tokens[id], hashes[id] = tok, hash
		}
		hash := hashes[id]
		return fmt.Sprintf("  - id: %s\n    groups: [%s]\n    tokens: [{sha256: %s, roles: [approver]}]\n", id, groups, hash)
	}
	dirBefore := "groups:\n  finance: {}\nusers:\n" + user("alice", "finance") + user("bob", "finance")
	dirFile := filepath.Join(work, "directory.yaml")
	polFile := filepath.Join(work, "policy.yaml")
	writeFile(t, dirFile, dirBefore)
	writeFile(t, polFile, upgradePolicyV1)
	flags := []string{"--policy", polFile, "--directory", dirFile}

	// The earlier release: three approvals under two policy versions.
	p := startServeBinary(t, old, data, flags...)
	propose := func(runID string) string {
		t.Helper()
		var res reviewAnswer
		body := map[string]any{
			"run":        map[string]any{"id": runID, "agent": "billing-bot", "requested_by": "carol"},
			"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send", "arguments": map[string]any{"amount": 900, "recipient": "Globex"}}},
		}
		if code := p.call("POST", "/v1/reviews", body, &res); code != 200 || res.Results[0].Verdict != "pending" {
			t.Fatalf("review %s: %d %+v", runID, code, res)
		}
		return res.Results[0].EventID
	}
	toReject := propose("up-reject") // policy upgrade-1
	toClaim := propose("up-claim")   // policy upgrade-1, approved before the upgrade
	p.waitStatus(toClaim, "pending")
	if code := p.callAs(tokens["bob"], "POST", "/v1/approvals/"+toClaim+"/votes", map[string]any{"decision": "approve"}, nil); code != 200 {
		t.Fatalf("approve before the upgrade: %d", code)
	}
	if code := p.callRaw("POST", "/v1/policy", upgradePolicyV2, nil); code != 200 {
		t.Fatalf("apply policy upgrade-2: %d", code)
	}
	toApprove := propose("up-approve") // policy upgrade-2
	p.waitStatus(toApprove, "pending")
	p.waitStatus(toReject, "pending")
	session := p.signIn(t, tokens["alice"])
	p.stop()

	// Alice leaves the finance group: the pending requests froze her in.
	writeFile(t, dirFile, "groups:\n  finance: {}\nusers:\n"+user("alice", "")+user("bob", "finance"))
	// The release under test, on the same data directory.
	n := startServe(t, data, flags...)
	waiting := make(chan reviewAnswer, 1)
	go func() {
		var res reviewAnswer
		body := map[string]any{
			"run":        map[string]any{"id": "up-approve", "agent": "billing-bot", "requested_by": "carol"},
			"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send", "arguments": map[string]any{"amount": 900, "recipient": "Globex"}}},
		}
		n.call("POST", "/v1/reviews?wait=60s", body, &res)
		waiting <- res
	}()
	var pol struct {
		Version string `json:"version"`
	}
	if code := n.call("GET", "/v1/policy", nil, &pol); code != 200 || pol.Version != "upgrade-2" {
		t.Errorf("live policy after the upgrade: %d %q, want upgrade-2", code, pol.Version)
	}
	if code := n.callAs(tokens["alice"], "POST", "/v1/approvals/"+toApprove+"/votes", map[string]any{"decision": "approve", "comment": "after the upgrade"}, nil); code != 200 {
		t.Fatalf("alice's approve after the upgrade: %d", code)
	}
	select {
	case res := <-waiting:
		if len(res.Results) != 1 || res.Results[0].Verdict != "allowed" || res.Results[0].EventID != toApprove {
			t.Fatalf("the waiting run resumed with %+v", res)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the waiting run did not resume")
	}
	if code := n.callAs(tokens["bob"], "POST", "/v1/approvals/"+toReject+"/votes", map[string]any{"decision": "reject", "comment": "no"}, nil); code != 200 {
		t.Errorf("reject after the upgrade: %d", code)
	}
	if code := n.call("POST", "/v1/approvals/"+toClaim+"/claim", map[string]any{}, nil); code != 200 {
		t.Errorf("first claim after the upgrade: %d", code)
	}
	if code := n.call("POST", "/v1/approvals/"+toClaim+"/claim", map[string]any{}, nil); code != 409 {
		t.Errorf("second claim after the upgrade: %d, want 409", code)
	}
	if !n.signedIn(t, session) {
		t.Error("the inbox session made by the earlier release is signed out after the upgrade")
	}
	// The policy bucket the earlier release kept history in takes the next
	// apply, and the version applied before the upgrade stays readable.
	if code := n.callRaw("POST", "/v1/policy", strings.Replace(upgradePolicyV2, `"upgrade-2"`, `"upgrade-3"`, 1)+"  - name: reads\n    tools: [\"read_*\"]\n    action: allow\n", nil); code != 200 {
		t.Errorf("apply policy upgrade-3 after the upgrade: %d", code)
	}
	if code := n.call("GET", "/v1/policy", nil, &pol); code != 200 || pol.Version != "upgrade-3" {
		t.Errorf("live policy after an apply after the upgrade: %d %q, want upgrade-3", code, pol.Version)
	}
	checkAuditAcrossUpgrade(t, n, auditedReleases[rev])
}

// checkAuditAcrossUpgrade exports the audit log after the upgrade: it
// verifies as one chain, holds the batches the release under test wrote
// (the two decisions and the claim made after the upgrade; a decision's
// entry follows its announcement, so the export is read again until they
// are there) and, when the earlier release kept a log, the entries it
// stored alone.
func checkAuditAcrossUpgrade(t *testing.T, n *serveProc, before bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		bundle := exportAudit(t, n)
		_, rep, err := audit.Verify(context.Background(), bytes.NewReader(bundle), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("the audit log after the upgrade does not verify: %+v", rep.Problems)
		}
		alone, batched := storedAloneAndBatched(t, bundle)
		if batched >= 3 && before == (alone > 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log after the upgrade: %d entries stored alone, %d in batches; want the 3 changes after it in batches and entries stored alone only where the earlier release kept a log (%v)",
				alone, batched, before)
		}
		<-tick.C
	}
}

func exportAudit(t *testing.T, n *serveProc) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.url+"/v1/audit/export", nil)
	req.Header.Set("Authorization", "Bearer "+n.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	bundle, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("audit export after the upgrade: %d %v", resp.StatusCode, err)
	}
	return bundle
}

// storedAloneAndBatched counts a bundle's entries stored alone and in batches.
func storedAloneAndBatched(t *testing.T, bundle []byte) (alone, batched int) {
	t.Helper()
	_, lines, err := audit.ReadBundle(bytes.NewReader(bundle))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		switch {
		case l.Entry == nil:
		case l.Index == 0:
			alone++
		default:
			batched++
		}
	}
	return alone, batched
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stop ends serve with SIGTERM, as an operator upgrading would.
func (p *serveProc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exit:
		p.exit <- nil
	case <-time.After(30 * time.Second):
		p.t.Fatal("serve did not stop on SIGINT")
	}
}

// waitStatus polls the API until the record of id has status.
func (p *serveProc) waitStatus(id, status string) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got struct {
			Record struct {
				Status string `json:"status"`
			} `json:"record"`
		}
		if p.call("GET", "/v1/approvals/"+id+"?wait=5s", nil, &got) == 200 && got.Record.Status == status {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("record %s did not reach %s", id, status)
		}
	}
}

// callRaw sends body as it is (not JSON-encoded) with the dev token.
func (p *serveProc) callRaw(method, path, body string, out any) int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// signIn signs in to the inbox with token and returns the session cookie.
func (p *serveProc) signIn(t *testing.T, token string) *http.Cookie {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// The sign-in form's CSRF token, matched to its cookie (a release
	// before it had none, and takes the post without).
	resp, err := c.Get(p.url + "/login")
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := ""
	if m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(form); m != nil {
		csrf = string(m[1])
	}
	resp, err = c.PostForm(p.url+"/login", url.Values{"token": {token}, "csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "countersign_session" && ck.Value != "" {
			return ck
		}
	}
	t.Fatalf("sign-in answered %d with no session cookie", resp.StatusCode)
	return nil
}

// signedIn reports whether the inbox serves its list to session (rather
// than sending it to the sign-in page).
func (p *serveProc) signedIn(t *testing.T, session *http.Cookie) bool {
	t.Helper()
	req, _ := http.NewRequest("GET", p.url+"/", nil)
	req.AddCookie(session)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

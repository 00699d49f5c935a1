package test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/test/oidcop"
)

// loginSetup starts the binary with sign-in through provider p, whose
// command-line client is oidc.cli_client_id, and a directory in which
// alice signs in by her provider subject and decides payments.
func loginSetup(t *testing.T, p *oidcop.Provider) *serveProc {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"directory.yaml": "users:\n  - {id: alice, email: alice@example.com, oidc_subject: sub-alice}\n",
		"policy.yaml": `version: "login-1"
default: allow
rules:
  - name: payments
    tools: ["payments.send"]
    action: require_approval
    approvers: [alice]
`,
		"countersign.yaml": "directory: directory.yaml\npolicy: policy.yaml\noidc:\n" +
			"  issuer: " + p.Issuer + "\n  client_id: " + p.ClientID + "\n  client_secret: " + p.ClientSecret + "\n" +
			"  cli_client_id: " + p.CLIClientID + "\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return startServeBinary(t, binary, t.TempDir(), "--config", filepath.Join(dir, "countersign.yaml"))
}

// cliSignedIn runs the CLI against s with the sign-ins kept in config and no
// token, from a directory without a serve's ./data.
func (p *serveProc) cliSignedIn(t *testing.T, config string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutEnv(os.Environ(), "COUNTERSIGN_TOKEN", "COUNTERSIGN_URL", "COUNTERSIGN_DATA"),
		"COUNTERSIGN_URL="+p.url, "COUNTERSIGN_CONFIG_DIR="+config)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// login runs 'countersign login' and signs username in at the provider's
// own login page, as the person's browser would, following the address
// the CLI prints to the CLI's loopback redirect. It returns the CLI's
// output and error.
func (p *serveProc) login(t *testing.T, config, username, password string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, "login", "--url", p.url, "--timeout", "2m")
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutEnv(os.Environ(), "COUNTERSIGN_TOKEN"), "COUNTERSIGN_CONFIG_DIR="+config)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var printed strings.Builder
	sc := bufio.NewScanner(stdout)
	auth := ""
	for auth == "" && sc.Scan() {
		printed.WriteString(sc.Text() + "\n")
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "http") {
			auth = line
		}
	}
	if auth == "" {
		t.Fatalf("login printed no address: %s %s", printed.String(), stderr.String())
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next := auth
	for range 12 {
		u, err := url.Parse(next)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", next, nil)
		if u.Path == "/login/username" {
			form := url.Values{"id": {u.Query().Get("authRequestID")}, "username": {username}, "password": {password}}
			req, _ = http.NewRequest("POST", next, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatalf("browser at %s: %v", next, err)
		}
		resp.Body.Close()
		if u.Path == "/callback" {
			break // the CLI's own redirect target answered
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" {
			t.Fatalf("browser at %s: %d", next, resp.StatusCode)
		}
		ref, _ := u.Parse(loc)
		next = ref.String()
	}
	for sc.Scan() {
		printed.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	return printed.String() + stderr.String(), err
}

// 'countersign login' (docs/approvers.md) signs alice in through the provider's login page
// in her browser; the CLI then acts as her (her approval is hers), keeps
// the sign-in readable by her alone, renews it with the provider when it
// runs out, and forgets it at logout. A person the directory does not
// know is signed in by the provider but refused by the server, and
// nothing is kept.
func TestLoginSignsTheCLIInThroughTheProvider(t *testing.T) {
	p := oidcop.Start(t)
	p.Add(oidcop.Person{Subject: "sub-alice", Username: "alice", Password: "alice-pw", Email: "alice@example.com", EmailVerified: true})
	p.Add(oidcop.Person{Subject: "sub-mallory", Username: "mallory", Password: "mallory-pw", Email: "mallory@example.com", EmailVerified: true})
	s := loginSetup(t, p)
	config := t.TempDir()

	out, err := s.login(t, config, "mallory", "mallory-pw")
	if err == nil || !strings.Contains(out, "refuses the token") || !strings.Contains(out, "does not know the account") {
		t.Fatalf("mallory's login: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(config, "login.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused sign-in was kept: %v", err)
	}

	out, err = s.login(t, config, "alice", "alice-pw")
	if err != nil || !strings.Contains(out, "Signed in to "+s.url+" as sub-alice") {
		t.Fatalf("alice's login: %v\n%s", err, out)
	}
	path := filepath.Join(config, "login.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("login.json: %v %v, want mode 0600", err, st)
	}

	var ans reviewAnswer
	call := map[string]any{"id": uuid.NewString(), "name": "payments.send", "arguments": map[string]any{"amount": 10}}
	if code := s.call("POST", "/v1/reviews", map[string]any{"run": map[string]any{"id": "run-login", "agent": "billing-bot"}, "tool_calls": []any{call}}, &ans); code != 200 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	if out, err := s.cliSignedIn(t, config, "approvals", "approve", id, "--comment", "signed in"); err != nil {
		t.Fatalf("approve as alice: %v\n%s", err, out)
	}
	var got struct {
		Record contracts.Record `json:"record"`
	}
	if s.call("GET", "/v1/approvals/"+id, nil, &got); got.Record.Status != contracts.StatusApproved || got.Record.Votes[0].Approver.ID != "alice" {
		t.Fatalf("record after the CLI's approval: %+v", got.Record)
	}

	// Run out: the CLI renews the sign-in with the provider.
	logins := map[string]map[string]any{}
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &logins); err != nil {
		t.Fatal(err)
	}
	first := logins[s.url]["id_token"]
	logins[s.url]["expiry"] = time.Now().Add(-time.Minute).Format(time.RFC3339)
	b, _ = json.Marshal(logins)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cliSignedIn(t, config, "approvals", "ls", "--status", "all"); err != nil || !strings.Contains(out, id[:8]) {
		t.Fatalf("ls after the sign-in ran out: %v\n%s", err, out)
	}
	b, _ = os.ReadFile(path)
	renewed := map[string]map[string]any{}
	if err := json.Unmarshal(b, &renewed); err != nil || renewed[s.url]["id_token"] == first {
		t.Fatalf("the sign-in was not renewed: %v", err)
	}

	if out, err := s.cliSignedIn(t, config, "logout"); err != nil || !strings.Contains(out, "Signed out of "+s.url) {
		t.Fatalf("logout: %v\n%s", err, out)
	}
	if out, err := s.cliSignedIn(t, config, "approvals", "ls"); err == nil || !strings.Contains(out, "no API token") {
		t.Fatalf("ls after logout: %v\n%s", err, out)
	}
}

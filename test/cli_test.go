package test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// A second serve on a data directory a running serve holds refuses at
// once, naming the running one, and changes nothing under the directory.
func TestSecondServeRefusesTheDataDirectory(t *testing.T) {
	data := t.TempDir()
	p := startServe(t, data)
	before := map[string][]byte{}
	for _, f := range []string{"serve.json", "resolver.json", "nats-users.json", "dev-token"} {
		b, err := os.ReadFile(filepath.Join(data, f))
		if err != nil {
			t.Fatal(err)
		}
		before[f] = b
	}

	cmd := exec.Command(binary, "serve", "--data", data, "--addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--policy", "../deploy/policy.yaml", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the second serve did not refuse at once")
	}
	if err == nil {
		t.Fatalf("the second serve ran:\n%s", out)
	}
	for _, want := range []string{"is in use by another countersign serve", "PID " + strconv.Itoa(p.cmd.Process.Pid), p.url} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	for f, b := range before {
		if now, err := os.ReadFile(filepath.Join(data, f)); err != nil || string(now) != string(b) {
			t.Errorf("%s changed under the running serve", f)
		}
	}
	if code := p.call("GET", "/healthz", nil, nil); code != 200 {
		t.Errorf("the running serve: /healthz %d", code)
	}

	// Killed with SIGKILL, the holder leaves no stale lock behind.
	p.kill()
	startServe(t, data)
}

// freeAddr returns a loopback address no one listens on, for a serve that
// must come back on the same address after a restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// demoProc is a running `countersign demo`.
type demoProc struct {
	cmd   *exec.Cmd
	lines chan string
	out   lockedBuffer
	exit  chan error
}

func startDemo(t *testing.T, data string, args ...string) *demoProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"demo", "--data", data}, args...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demoProc{cmd: cmd, lines: make(chan string, 1000), exit: make(chan error, 1)}
	cmd.Stderr = &d.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.out.Write([]byte(sc.Text() + "\n"))
			d.lines <- sc.Text()
		}
		close(d.lines)
		d.exit <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return d
}

// waitLine returns the demo's next line that contains want, runs of
// spaces counting as one.
func (d *demoProc) waitLine(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("the demo ended without saying %q:\n%s", want, d.out.String())
			}
			if strings.Contains(strings.Join(strings.Fields(l), " "), want) {
				return l
			}
		case <-deadline:
			t.Fatalf("the demo did not say %q:\n%s", want, d.out.String())
		}
	}
}

// allApprovals lists every approval's id and status.
func (p *serveProc) allApprovals() map[string]string {
	p.t.Helper()
	var list listAnswer
	if code := p.call("GET", "/v1/approvals?limit=500", nil, &list); code != 200 {
		p.t.Fatalf("list: %d", code)
	}
	out := map[string]string{}
	for _, it := range list.Items {
		out[it.Record.Request.EventID] = it.Record.Status
	}
	return out
}

// The demo waits for decisions while the server is killed (SIGKILL) and
// restarted, and reports decisions made after the restart; run again, it
// re-attaches to the same approvals instead of creating new ones.
func TestDemoKeepsWaitingAcrossAServerRestartAndReattaches(t *testing.T) {
	data, addr := t.TempDir(), freeAddr(t)
	p := startServe(t, data, "--addr", addr)
	d := startDemo(t, data)
	session := regexp.MustCompile(`Demo session (\S+) \(kept in`).FindStringSubmatch(d.waitLine(t, "Demo session"))
	if session == nil {
		t.Fatalf("the demo did not keep its session:\n%s", d.out.String())
	}
	var pending []string
	approveRe := regexp.MustCompile(`(\S+)\s+(\S+)\s+→ pending — waiting for a human: \S*countersign approvals approve (\S+)`)
	tools := map[string]string{}
	for {
		l := d.waitLine(t, "")
		if m := approveRe.FindStringSubmatch(l); m != nil {
			pending = append(pending, m[3])
			tools[m[2]] = m[3]
		}
		if strings.Contains(l, "call(s) wait for a decision") {
			break
		}
	}
	if len(pending) == 0 || tools["payments.send"] == "" || tools["db.delete_rows"] == "" {
		t.Fatalf("pending calls %v:\n%s", tools, d.out.String())
	}
	if !strings.Contains(d.out.String(), "the development token is in "+filepath.Join(data, "dev-token")) {
		t.Errorf("the demo does not say where the development token is:\n%s", d.out.String())
	}
	first := p.allApprovals()
	if len(first) != len(pending) {
		t.Fatalf("%d approvals stored, the demo waits for %d", len(first), len(pending))
	}

	// The server dies while the demo waits, and comes back on the same address.
	p.kill()
	d.waitLine(t, "is not answering")
	p2 := startServe(t, data, "--addr", addr)
	for _, id := range pending {
		decision := []string{"approvals", "approve", id}
		if id == tools["db.delete_rows"] {
			decision = []string{"approvals", "reject", id, "--reason", "not the customers table"}
		}
		if out, err := p2.cli(decision...); err != nil {
			t.Fatalf("%v: %v\n%s", decision, err, out)
		}
	}
	d.waitLine(t, "answers again")
	d.waitLine(t, "payments.send → allowed — claimed and executed")
	d.waitLine(t, "db.delete_rows → denied: A human reviewer rejected this tool call. Reason: not the customers table")
	select {
	case err := <-d.exit:
		if err != nil {
			t.Fatalf("the demo failed: %v\n%s", err, d.out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the demo did not end once everything was decided:\n%s", d.out.String())
	}

	// Run again: the same session re-attaches, nothing new is created, and
	// the claimed payment is not run twice.
	again := startDemo(t, data, "--no-wait")
	if l := again.waitLine(t, "Demo session"); !strings.Contains(l, "Demo session "+session[1]+" ") {
		t.Fatalf("the second demo has another session: %s", l)
	}
	if l := again.waitLine(t, "payments.send → already_executed"); !strings.Contains(l, "already_executed: ") {
		t.Errorf("the verdict and its reason run together: %s", l)
	}
	if err := <-again.exit; err != nil {
		t.Fatalf("the second demo failed: %v\n%s", err, again.out.String())
	}
	after := p2.allApprovals()
	if len(after) != len(first) {
		t.Fatalf("%d approvals after the second demo, %d before: it created new requests", len(after), len(first))
	}
	for id := range first {
		if _, ok := after[id]; !ok {
			t.Fatalf("approval %s is gone", id)
		}
	}
}

// The requester's approval through their email link is refused; the link
// is not used up: it still shows the form, and a rejection through it
// counts and decides.
func TestEmailLinkRefusedVoteLeavesTheLinkUsable(t *testing.T) {
	r := newNotifyRig(t, 0)
	self := r.waitingReview("run-email-alice", "alice") // alice asks, and is an approver
	mail := r.mailTo("alice@example.com", "Approval needed")
	link := regexp.MustCompile(`https?://[^\s"<>]+/e/[A-Za-z0-9._-]+`).FindString(mail.Text)
	if link == "" {
		t.Fatalf("no personal link in the email:\n%s", mail.Text)
	}
	page := func(resp *http.Response, err error) (int, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := page(http.Get(link))
	h := regexp.MustCompile(`name="h" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if code != 200 || h == nil {
		t.Fatalf("GET %d:\n%s", code, body)
	}
	code, body = page(http.PostForm(link, url.Values{"decision": {"approve"}, "h": {h[1]}}))
	if code != http.StatusForbidden || !strings.Contains(body, htmlEscape(contracts.Reason(contracts.ReasonSelfApproval).Message())) || !strings.Contains(body, "<form") {
		t.Fatalf("self-approval: %d\n%s", code, body)
	}
	code, body = page(http.Get(link))
	if code != 200 || strings.Contains(body, "You already answered") || !strings.Contains(body, `value="reject"`) {
		t.Fatalf("the link after the refusal: %d\n%s", code, body)
	}
	code, body = page(http.PostForm(link, url.Values{"decision": {"reject"}, "h": {h[1]}, "comment": {"wrong account"}}))
	if code != 200 || !strings.Contains(body, "Your rejection was recorded.") {
		t.Fatalf("reject through the same link: %d\n%s", code, body)
	}
	if v, reason := r.verdict(self); v != "denied" || !strings.Contains(reason, "wrong account") {
		t.Fatalf("alice's run: %s %q, want denied", v, reason)
	}
	rec := r.record(mail.Header.Get("X-Countersign-Event-Id"))
	if len(rec.RefusedVotes) != 1 || rec.RefusedVotes[0].Reason != contracts.ReasonSelfApproval || len(rec.Votes) != 1 ||
		rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaEmail}) {
		t.Fatalf("record: votes %+v, refused %+v", rec.Votes, rec.RefusedVotes)
	}
}

// htmlEscape escapes s as html/template writes text.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

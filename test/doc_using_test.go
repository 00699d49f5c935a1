package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
)

// makeRunServe starts serve as make run starts it, with extra flags, and
// returns it with the API address the docs name.
func makeRunServe(t *testing.T, extra ...string) (*serveProc, string) {
	t.Helper()
	flags, addr := makeRun(t)
	return startServeBinary(t, binary, t.TempDir(), append(flags, extra...)...), addr
}

// resolverFile is what serve writes to <data>/resolver.json.
type resolverFile struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	// InboxPrefix is where the resolver's connection takes its replies.
	InboxPrefix string `json:"inbox_prefix"`
}

func readResolver(t *testing.T, p *serveProc) resolverFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(p.data, "resolver.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r resolverFile
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// outputLines runs the command to its end and returns its output's lines.
func outputLines(t *testing.T, out []byte, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestUsingGoExamplesRun runs docs/using.md's Go library and Go HTTP client
// examples as written: the gate reviews three calls under deploy/policy.yaml
// (a payment a human approves, a shell command the policy denies, a read it
// allows) and runs the allowed ones after claiming them; the HTTP client
// runs an approved payment once, hands a rejection to the model, and does
// not run the same call a second time.
func TestUsingGoExamplesRun(t *testing.T) {
	lib := readDocExamples(t, "docs/using.md", "# Go library")
	lib.take(t, "go", "gate.Review(")
	hc := readDocExamples(t, "docs/using.md", "# Go HTTP client")
	hc.take(t, "go", "client.New(")
	goExamplesProgram(t)
	p, _ := makeRunServe(t)
	res := readResolver(t, p)
	gateUser := roleUsers(t, p.data)["orchestrator"]
	ch := followChanges(t, p)

	// The library: one call of each kind.
	payment := `{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`
	read := `{"path":"/srv/invoices/42.pdf"}`
	calls := `[{"id":"pay","name":"payments_send","arguments":` + payment + `},` +
		`{"id":"shell","name":"shell_exec","arguments":{"command":"rm -rf /"}},` +
		`{"id":"read","name":"read_file","arguments":` + read + `}]`
	cmd := runGoExample(t, "goLibrary", "EX_NATS_URL="+res.URL, "EX_NATS_USER="+gateUser.Name,
		"EX_NATS_PASSWORD="+gateUser.Password, "EX_RUN_ID=run-go-library", "EX_CALLS="+calls)
	done := make(chan []string, 1)
	go func() { out, err := cmd.CombinedOutput(); done <- outputLines(t, out, err) }()
	ids := pendingOf(t, p, ch, "run-go-library", 1)
	if code := p.call("POST", "/v1/approvals/"+ids[0]+"/votes", map[string]any{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve the payment: %d", code)
	}
	got := <-done
	want := []string{"run " + payment, "reply Agents may not run shell commands. Ask a human operator instead.", "run " + read}
	if len(got) != len(want) {
		t.Fatalf("the Go library example printed %s, want %s", fmtLines(got), fmtLines(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i+1, got[i], want[i])
		}
	}
	var rec struct {
		Record contracts.Record `json:"record"`
	}
	if p.call("GET", "/v1/approvals/"+ids[0], nil, &rec); rec.Record.Claim == nil {
		t.Errorf("the payment ran without its approval being claimed: %+v", rec.Record)
	}

	// The HTTP client: approved, then the same call again; rejected.
	client := func(callID, decision string) []string {
		t.Helper()
		cmd := runGoExample(t, "goHTTPClient", "EX_URL="+p.url, "EX_TOKEN="+p.token,
			"EX_RUN_ID=run-go-client", "EX_CALL_ID="+callID, "EX_ARGS="+payment)
		done := make(chan []string, 1)
		go func() { out, err := cmd.CombinedOutput(); done <- outputLines(t, out, err) }()
		if decision != "" {
			ids := pendingOf(t, p, ch, "run-go-client", 1)
			if code := p.call("POST", "/v1/approvals/"+ids[0]+"/votes",
				map[string]any{"decision": decision, "comment": "wrong account"}, nil); code != http.StatusOK {
				t.Fatalf("%s %s: %d", decision, callID, code)
			}
		}
		return <-done
	}
	if got := client("call-1", "approve"); len(got) != 2 || got[0] != "sent "+payment || got[1] != "verdict allowed" {
		t.Errorf("approved: the Go HTTP client example printed %s, want the payment sent once", fmtLines(got))
	}
	if got := client("call-1", ""); len(got) != 2 || !strings.HasPrefix(got[0], "reply ") || got[1] != "verdict already_executed" {
		t.Errorf("the same call again: the Go HTTP client example printed %s, want a reply and no payment", fmtLines(got))
	}
	if got := client("call-2", "reject"); len(got) != 2 || !strings.HasPrefix(got[0], "reply ") ||
		!strings.Contains(got[0], "wrong account") || got[1] != "verdict denied" {
		t.Errorf("rejected: the Go HTTP client example printed %s, want the rejection as a reply", fmtLines(got))
	}
	lib.allRun(t)
	hc.allRun(t)
}

// TestUsingCLIExamplesRun runs docs/using.md's CLI examples as written, from
// a directory holding bin/countersign and the server's ./data (so the CLI
// needs no flags), each <event_id> a pending payment of its own.
func TestUsingCLIExamplesRun(t *testing.T) {
	d := readDocExamples(t, "docs/using.md", "# CLI")
	p, addr := makeRunServe(t)
	sh := newDocShell(t, p, addr)
	cmds := d.take(t, "sh", "approvals ls", "token new").shell(t)
	// The reader's policy file, as policy apply is given it.
	pol, err := os.ReadFile("../deploy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sh.dir, "my-policy.yaml"),
		regexp.MustCompile(`(?m)^version: .*$`).ReplaceAll(pol, []byte(`version: "my-policy-1"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cmd := range cmds {
		n++
		line := strings.Join(cmd, " ")
		id := ""
		if strings.Contains(line, "<event_id>") || strings.Contains(line, "--run run-7") || strings.Contains(line, "approvals ls") {
			run := "run-cli-" + strconv.Itoa(n) // a run of its own: the grant below covers its run
			if strings.Contains(line, "run-7") {
				run = "run-7"
			}
			id = pendingPayment(t, p, run, "call-1")
			sh.vars["event_id"] = id
		}
		if strings.Contains(line, "audit") {
			// The timeline of a decided approval.
			sh.run(t, []string{"bin/countersign", "approvals", "approve", id})
		}
		out := sh.run(t, cmd)
		var want []string
		switch {
		case strings.Contains(line, "approvals ls"):
			want = []string{id[:8], "payments_send"}
		case strings.Contains(line, "approvals show"):
			want = []string{id, "pending", "payments"}
		case strings.Contains(line, "--run run-7"):
			want = []string{id, "approved"}
		case strings.Contains(line, "approvals approve") && strings.Contains(line, "--grant"):
			want = []string{"Vote counted: approve " + id + ". Status is now approved."}
			sh.vars["grant"] = id
		case strings.Contains(line, "approvals approve"):
			want = []string{"Vote counted: approve " + id + ". Status is now approved."}
		case strings.Contains(line, "approvals reject"):
			want = []string{"Vote counted: reject " + id + ". Status is now rejected."}
		case strings.Contains(line, "grants ls"):
			want = []string{sh.vars["grant"][:8], "payments_send"}
		case strings.Contains(line, "audit"):
			want = []string{"requested", "decided", "approved"}
		case strings.Contains(line, "oversight"):
			want = []string{"payments"}
		case strings.Contains(line, "policy apply"):
			want = []string{"my-policy-1"}
		case strings.Contains(line, "token new"):
			want = []string{"alice", "approver"}
		default:
			t.Fatalf("docs/using.md: %q: a command this test does not know what to expect of", line)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%q does not say %q:\n%s", line, w, out)
			}
		}
	}
	if n != 11 {
		t.Errorf("docs/using.md's CLI block has %d commands; this test knows 11", n)
	}

	// The --json read, piped to jq.
	id := pendingPayment(t, p, "run-cli-json", "call-json")
	block := d.take(t, "sh", "--json | jq")
	out := sh.bash(t, block.text)
	if !strings.Contains(out, id+"\tpending") {
		t.Errorf("%s printed no line %q:\n%s", block.text, id+"\tpending", out)
	}
	d.allRun(t)
}

// TestUsingNATSVoteRuns publishes docs/using.md's vote with the nats CLI's
// words as written: as the resolver user, with the password jq reads from
// data/resolver.json, on the subject and with the Nats-Msg-Id it shows. The
// arbiter counts it for alice once the directory lists her, and refuses the
// same vote in the name of someone it does not list (unknown_approver).
func TestUsingNATSVoteRuns(t *testing.T) {
	d := readDocExamples(t, "docs/using.md", "# Voting from any NATS client")
	dirFile := filepath.Join(t.TempDir(), "directory.yaml")
	writeDirectory(t, dirFile, newPerson("alice", "finance"))
	p, addr := makeRunServe(t, "--directory", dirFile)
	sh := newDocShell(t, p, addr)
	res := readResolver(t, p)
	cmds := d.take(t, "sh", "hitl.approval.resolved.<event_id>").shell(t)
	if len(cmds) != 1 {
		t.Fatalf("want one nats command, got %q", cmds)
	}
	cmd := cmds[0]
	flags := map[string]string{}
	var rest []string
	for i := 1; i < len(cmd); i++ {
		if strings.HasPrefix(cmd[i], "-") && i+1 < len(cmd) {
			flags[cmd[i]] = cmd[i+1]
			i++
			continue
		}
		rest = append(rest, cmd[i])
	}
	natsAddr := makeRunNATS(t)
	if cmd[0] != "nats" || flags["--server"] != "nats://"+natsAddr || len(rest) != 3 || rest[0] != "pub" {
		t.Fatalf("want `nats --server nats://%s … pub SUBJECT -H … PAYLOAD`, got %q", natsAddr, cmd)
	}
	if flags["--user"] != res.User {
		t.Errorf("--user %s: serve's resolver user is %s", flags["--user"], res.User)
	}
	password := sh.bash(t, `printf %s "`+flags["--password"]+`"`)
	if password != res.Password {
		t.Errorf("--password %s does not read the resolver's password", flags["--password"])
	}
	nc, err := nats.Connect(res.URL, nats.UserInfo(flags["--user"], password), nats.CustomInboxPrefix(res.InboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publish := func(eventID, voteID, approver string) {
		t.Helper()
		sh.vars["event_id"], sh.vars["vote_id"] = eventID, voteID
		m := nats.NewMsg(sh.expand(t, rest[1]))
		k, v, ok := strings.Cut(sh.expand(t, flags["-H"]), ":")
		if !ok {
			t.Fatalf("-H %q is not KEY:VALUE", flags["-H"])
		}
		m.Header.Set(k, v)
		m.Data = []byte(strings.Replace(sh.expand(t, rest[2]), `"id":"alice"`, `"id":"`+approver+`"`, 1))
		if !json.Valid(m.Data) {
			t.Fatalf("the vote is not JSON: %s", m.Data)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	counted := pendingPayment(t, p, "run-nats", "call-1")
	publish(counted, "vote-alice-1", "alice")
	if st := p.status(t, counted); st != "approved" {
		t.Fatalf("alice's vote on the bus: the approval is %s, want approved", st)
	}
	ch := followChanges(t, p)
	refused := pendingPayment(t, p, "run-nats", "call-2")
	publish(refused, "vote-mallory-1", "mallory")
	for {
		var rec struct {
			Record contracts.Record `json:"record"`
		}
		p.call("GET", "/v1/approvals/"+refused, nil, &rec)
		if len(rec.Record.RefusedVotes) > 0 {
			if r := rec.Record.RefusedVotes[0]; r.Reason != "unknown_approver" || rec.Record.Status != "pending" {
				t.Errorf("a vote for someone the directory does not list: refused %s, status %s; want unknown_approver, pending", r.Reason, rec.Record.Status)
			}
			break
		}
		ch.next(t)
	}
	d.allRun(t)
}

// makeRunNATS is the NATS address make run's embedded server listens on.
func makeRunNATS(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NATS\s*\?=\s*(\S+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("Makefile: no NATS ?= default")
	}
	return string(m[1])
}

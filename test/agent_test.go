package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
)

const agentEnv = "COUNTERSIGN_E2E_AGENT"

// agentMain is a separate agent process using the Go library against the
// embedded NATS server of a running serve: it reviews one gated call and
// reports what happens on stdout, one line per step.
func agentMain() int {
	fail := func(err error) int { fmt.Println("error", err); return 1 }
	nc, err := nats.Connect(os.Getenv("AGENT_NATS_URL"), nats.UserInfo(os.Getenv("AGENT_NATS_USER"), os.Getenv("AGENT_NATS_PASSWORD")),
		embedded.InboxOptionFor(os.Getenv("AGENT_NATS_USER")))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: js})
	if err != nil {
		return fail(err)
	}
	defer gate.Close()
	run := contracts.Run{ID: os.Getenv("AGENT_RUN_ID"), Agent: "e2e-agent", RequestedBy: "e2e-user"}
	calls := []orchestrator.ToolCall{{ID: "call-1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":42}`)}}
	sub, err := gate.Submit(ctx, run, calls)
	if err != nil {
		return fail(err)
	}
	fmt.Println("submitted", sub[0].Verdict, sub[0].EventID)
	v, err := gate.Review(ctx, run, calls)
	if err != nil {
		return fail(err)
	}
	fmt.Println("verdict", v[0].Verdict, v[0].EventID)
	if v[0].Verdict == orchestrator.VerdictAllowed {
		if err := v[0].Permit.Claim(ctx); err != nil {
			return fail(err)
		}
		fmt.Println("claimed")
	}
	return 0
}

type agentProc struct {
	cmd   *exec.Cmd
	lines chan string
}

func startAgent(t *testing.T, p *serveProc, runID string) *agentProc {
	t.Helper()
	var users []struct{ Name, Password, Role string }
	b, err := os.ReadFile(filepath.Join(p.data, "nats-users.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &users); err != nil {
		t.Fatal(err)
	}
	var info struct {
		NATSURL string `json:"nats_url"`
	}
	b, err = os.ReadFile(filepath.Join(p.data, "serve.json"))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(b, &info)
	env := append(os.Environ(), agentEnv+"=1", "AGENT_NATS_URL="+info.NATSURL, "AGENT_RUN_ID="+runID)
	for _, u := range users {
		if u.Role == "orchestrator" {
			env = append(env, "AGENT_NATS_USER="+u.Name, "AGENT_NATS_PASSWORD="+u.Password)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, lines: make(chan string, 10)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return a
}

// next returns the agent's next output line, split into words.
func (a *agentProc) next(t *testing.T) []string {
	t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			t.Fatal("agent exited early")
		}
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "error" {
			t.Fatalf("agent: %s", l)
		}
		return f
	case <-time.After(60 * time.Second):
		t.Fatal("agent said nothing")
	}
	return nil
}

func TestKilledAgentReattaches(t *testing.T) {
	p := startServe(t, t.TempDir())
	a := startAgent(t, p, "run-reattach")
	first := a.next(t)
	if first[0] != "submitted" || first[1] != "pending" {
		t.Fatalf("agent: %v", first)
	}
	eventID := first[2]
	// Kill the waiting agent, then decide while it is gone.
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
	var vote map[string]any
	if code := p.call("POST", "/v1/approvals/"+eventID+"/votes", map[string]any{"decision": "approve"}, &vote); code != 200 {
		t.Fatalf("vote: %d %v", code, vote)
	}
	// The re-run re-attaches to the same approval and may run the call once.
	b := startAgent(t, p, "run-reattach")
	if l := b.next(t); l[0] != "submitted" || l[1] != "allowed" || l[2] != eventID {
		t.Fatalf("re-run: %v (want allowed %s)", l, eventID)
	}
	if l := b.next(t); l[0] != "verdict" || l[1] != "allowed" {
		t.Fatalf("re-run: %v", l)
	}
	if l := b.next(t); l[0] != "claimed" {
		t.Fatalf("re-run: %v", l)
	}
	// A third run must not execute it again.
	c := startAgent(t, p, "run-reattach")
	if l := c.next(t); l[1] != "already_executed" {
		t.Fatalf("third run: %v", l)
	}
}

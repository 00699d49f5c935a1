package codingagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pinnedClaude is the Claude Code release these tests drive
// (package.json pins the same).
const pinnedClaude = "2.1.332"

// binary is the countersign binary built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-hook")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-o", binary, "../../services/countersign")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building countersign:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentCLI is a coding agent CLI these tests drive, pinned in
// package.json and installed (with the others) by install-claude.sh when
// it is missing or another version.
type agentCLI struct {
	bin, pinned string
	// version reads the version the CLI's --version prints.
	version func(out string) string

	once sync.Once
	path string
	err  error
}

var (
	claude = &agentCLI{bin: "claude", pinned: pinnedClaude, version: func(out string) string {
		v, _, _ := strings.Cut(out, " ")
		return v
	}}
	codex = &agentCLI{bin: "codex", pinned: pinnedCodex, version: func(out string) string {
		return strings.TrimPrefix(out, "codex-cli ")
	}}
)

// claudeBin is the pinned Claude Code.
func claudeBin(t *testing.T) string { return claude.get(t) }

// codexBin is the pinned Codex CLI.
func codexBin(t *testing.T) string { return codex.get(t) }

// get is the CLI's path, installing it first when it is missing or
// another version.
func (c *agentCLI) get(t *testing.T) string {
	t.Helper()
	c.once.Do(func() {
		path, err := filepath.Abs("node_modules/.bin/" + c.bin)
		if err != nil {
			c.err = err
			return
		}
		if c.versionOf(path) != c.pinned {
			if out, err := exec.Command("sh", "install-claude.sh").CombinedOutput(); err != nil {
				c.err = fmt.Errorf("sh test/codingagent/install-claude.sh: %v\n%s", err, out)
				return
			}
		}
		if v := c.versionOf(path); v != c.pinned {
			c.err = fmt.Errorf("%s --version says %q after install-claude.sh, want %s", c.bin, v, c.pinned)
			return
		}
		c.path = path
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.path
}

func (c *agentCLI) versionOf(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return ""
	}
	return c.version(strings.TrimSpace(string(out)))
}

// serveProc is a running `countersign serve`.
type serveProc struct {
	cmd        *exec.Cmd
	url, token string
	exit       chan error
}

// startServe runs `countersign serve` on a new data directory under the
// coding agent policy and waits until it prints its URL.
func startServe(t *testing.T) *serveProc {
	t.Helper()
	data := t.TempDir()
	cmd := exec.Command(binary, "serve", "--data", data, "--addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--log-level", "warn", "--policy", "../../deploy/policies/coding-agent.yaml")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exit: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "API:") {
				urls <- strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "API:"))[0], "/v1")
			}
		}
	}()
	go func() { p.exit <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-p.exit })
	select {
	case p.url = <-urls:
	case err := <-p.exit:
		p.exit <- err
		t.Fatalf("serve exited before it was ready: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not become ready:\n%s", stderr.String())
	}
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	p.token = strings.TrimSpace(string(tok))
	return p
}

// cli runs the countersign CLI against p.
func (p *serveProc) cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+p.url, "COUNTERSIGN_TOKEN="+p.token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("countersign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pendingApproval returns the id of a pending approval of run ("": any)
// once there is one, reading again on each change the server announces.
func (p *serveProc) pendingApproval(t *testing.T, run string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events: %v %v", err, resp)
	}
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	for {
		var page struct {
			Items []struct {
				Record struct {
					Request struct {
						EventID string `json:"event_id"`
					} `json:"request"`
				} `json:"record"`
			} `json:"items"`
		}
		args := []string{"approvals", "ls", "--json"}
		if run != "" {
			args = append(args, "--run", run)
		}
		out := p.cli(t, args...)
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("approvals ls --json: %v\n%s", err, out)
		}
		if len(page.Items) > 0 {
			return page.Items[0].Record.Request.EventID
		}
		for events.Scan() && events.Text() != "" {
		}
		if events.Err() != nil || ctx.Err() != nil {
			t.Fatalf("no approval appeared (run %q): %v", run, events.Err())
		}
	}
}

// startAgent starts an agent CLI's command, killed at the end of the test
// if it is still running.
func startAgent(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

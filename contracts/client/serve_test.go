package client_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/services/api"
)

// serveBinary is the countersign binary the tests run, built once by
// TestMain.
var serveBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-client")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serveBinary = filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-o", serveBinary, "../../services/countersign")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building countersign:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// servePolicy gates payments on alice.
const servePolicy = `
version: "client-serve-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice]
`

// serveProc is a real `countersign serve` on its own data directory: the
// agent's token is serve's development token (subject agent-svc), alice's
// an approver token of the directory. kill -9 and start again keep the data
// directory and the port.
type serveProc struct {
	t          *testing.T
	dir, data  string
	addr       string // host:port, fixed after the first start
	url        string
	agentToken string
	aliceToken string

	cmd    *exec.Cmd
	exited chan struct{}
	stderr lockedBuffer
}

func startServe(t *testing.T) *serveProc {
	t.Helper()
	dir := t.TempDir()
	tok, sum, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	directory := "users:\n  - id: alice\n    tokens:\n      - name: alice\n        sha256: " + sum + "\n        roles: [approver]\n"
	for name, content := range map[string]string{"policy.yaml": servePolicy, "directory.yaml": directory} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := &serveProc{t: t, dir: dir, data: filepath.Join(dir, "data"), addr: "127.0.0.1:0", aliceToken: tok}
	s.start()
	data, err := os.ReadFile(filepath.Join(s.data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.agentToken = strings.TrimSpace(string(data))
	t.Cleanup(s.kill)
	return s
}

// start runs serve and returns once it prints its API line.
func (s *serveProc) start() {
	s.t.Helper()
	cmd := exec.Command(serveBinary, "serve", "--data", s.data, "--addr", s.addr, "--nats-listen", "off",
		"--policy", filepath.Join(s.dir, "policy.yaml"), "--directory", filepath.Join(s.dir, "directory.yaml"),
		"--log-level", "warn")
	cmd.Env = append(os.Environ(), "USER=agent-svc")
	cmd.Stderr = &s.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
		close(s.exited)
	}()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				s.t.Fatalf("serve exited before it was ready:\n%s", s.stderr.String())
			}
			if rest, found := strings.CutPrefix(strings.TrimSpace(line), "API:"); found {
				u, err := url.Parse(strings.TrimSuffix(strings.Fields(rest)[0], "/v1"))
				if err != nil {
					s.t.Fatal(err)
				}
				s.url, s.addr = u.String(), u.Host
				go func() { // keep reading, so serve never blocks on its stdout
					for range lines {
					}
				}()
				return
			}
		case <-deadline:
			s.t.Fatalf("serve printed no API line within 60 s:\n%s", s.stderr.String())
		}
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (s *serveProc) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// lockedBuffer collects a process's output while a test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

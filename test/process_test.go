package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// binary is the countersign binary built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) != "" {
		os.Exit(agentMain())
	}
	dir, err := os.MkdirTemp("", "countersign-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-race", "-o", binary, "../services/countersign")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building countersign:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serveProc is a running `countersign serve`.
type serveProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	url   string
	data  string
	token string
	lines chan string
	exit  chan error
}

// startServe runs `countersign serve` on data and waits until it prints its
// URL. Ports are chosen by the OS.
func startServe(t *testing.T, data string, extra ...string) *serveProc {
	t.Helper()
	return startServeBinary(t, binary, data, append([]string{"--policy", "../deploy/policy.yaml"}, extra...)...)
}

// startServeBinary runs `bin serve` on data with extra flags (startServe
// with another build, such as an earlier release).
func startServeBinary(t *testing.T, bin, data string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{t: t, cmd: cmd, data: data, lines: make(chan string, 100), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { p.exit <- cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	deadline := time.After(60 * time.Second)
	for p.url == "" {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("serve exited before it was ready; stderr:\n%s", stderr.String())
			}
			if i := strings.Index(line, "API:"); i >= 0 && strings.HasPrefix(strings.TrimSpace(line), "API:") {
				f := strings.Fields(line[i+len("API:"):])
				p.url = strings.TrimSuffix(f[0], "/v1")
			}
		case <-deadline:
			t.Fatalf("serve did not become ready; stderr:\n%s", stderr.String())
		}
	}
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	p.token = strings.TrimSpace(string(tok))
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *serveProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exit
	p.exit <- nil // later calls return at once
}

// call sends a JSON request with the dev token and decodes the answer.
func (p *serveProc) call(method, path string, body, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.token)
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

// cli runs the countersign CLI against p and returns its output.
func (p *serveProc) cli(args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+p.url, "COUNTERSIGN_TOKEN="+p.token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lockedBuffer collects a process's output while the test may read it.
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

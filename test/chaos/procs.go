package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one `countersign serve --roles <role>` replica. It keeps its data
// directory and, for the api role, its HTTP address across restarts.
type proc struct {
	name   string
	role   string
	binary string
	data   string
	args   []string // after serve, without --addr

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	addr   string // host:port of the HTTP listener once known
	url    string // http://host:port of the api role
	starts int
}

func newProc(binary, role string, idx int, root string, common []string) (*proc, error) {
	p := &proc{name: fmt.Sprintf("%s-%d", role, idx), role: role, binary: binary, addr: "127.0.0.1:0"}
	p.data = filepath.Join(root, p.name)
	if err := os.MkdirAll(p.data, 0o700); err != nil {
		return nil, err
	}
	p.args = append([]string{"serve", "--roles", role, "--data", p.data}, common...)
	return p, nil
}

// start runs the process and returns once it has printed that it is
// running (the api role: its API URL). A start that fails (the bus may be
// electing leaders) is retried until ctx ends.
func (p *proc) start(ctx context.Context) error {
	for {
		err := p.startOnce(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last start: %v)", p.name, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (p *proc) startOnce(ctx context.Context) error {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(p.data, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- start %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.binary, append(p.args, "--addr", addr)...)
	cmd.Stderr = logf
	dieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if signalled {
				continue
			}
			switch {
			case p.role == "api" && strings.HasPrefix(line, "API:"):
				f := strings.Fields(strings.TrimPrefix(line, "API:"))
				if len(f) > 0 {
					ready <- strings.TrimSuffix(f[0], "/v1")
					signalled = true
				}
			case p.role != "api" && strings.HasPrefix(line, "Countersign is running roles"):
				ready <- ""
				signalled = true
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	select {
	case u := <-ready:
		p.mu.Lock()
		p.cmd, p.exited = cmd, exited
		p.starts++
		if u != "" {
			p.url = u
			if pu, err := url.Parse(u); err == nil {
				p.addr = pu.Host
			}
		}
		p.mu.Unlock()
		return nil
	case <-exited:
		if addr != "127.0.0.1:0" {
			// The old port could not be bound again: take any port.
			p.mu.Lock()
			p.addr = "127.0.0.1:0"
			p.mu.Unlock()
		}
		return fmt.Errorf("%s exited before it was ready; see %s", p.name, filepath.Join(p.data, "serve.log"))
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return fmt.Errorf("%s was not ready in time", p.name)
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// alive reports whether the process runs and has not exited on its own.
func (p *proc) alive() (bool, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return false, nil
	}
	select {
	case <-exited:
		return false, errors.New(p.name + " exited on its own: " + cmd.ProcessState.String())
	default:
		return true, nil
	}
}

// URL is the api role's base URL ("" while it is not running).
func (p *proc) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return ""
	}
	return p.url
}

// logTail is the end of the process's stderr log (starts, warnings and
// errors), for failure reports.
func (p *proc) logTail(n int) string {
	data, err := os.ReadFile(filepath.Join(p.data, "serve.log"))
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if strings.HasPrefix(l, "----") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") ||
			strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "without a terminal record") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

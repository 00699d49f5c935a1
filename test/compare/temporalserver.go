package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
)

// temporalCLI is the Go package of the Temporal CLI, whose `server
// start-dev` is the dev server. Later releases carry a replace directive in
// their go.mod, which `go install pkg@version` refuses.
const temporalCLI = "github.com/temporalio/cli/cmd/temporal"

// installTemporal installs the CLI at version into dir/temporal-<version>
// with `go install` unless it is there already, and returns its path.
func installTemporal(ctx context.Context, dir, version string) (string, error) {
	bin := filepath.Join(dir, "temporal-"+version, "bin")
	path := filepath.Join(bin, "temporal")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	fmt.Fprintf(os.Stderr, "compare: installing %s@%s into %s (once; a few minutes)\n", temporalCLI, version, bin)
	cmd := exec.CommandContext(ctx, goCommand(), "install", temporalCLI+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", temporalCLI, version, err)
	}
	return path, nil
}

// goCommand is the go tool that builds the CLI: $GO, or go from PATH.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// temporalServer is a running `temporal server start-dev`.
type temporalServer struct {
	cmd    *exec.Cmd
	exited chan struct{}
	addr   string
	log    string
}

// startTemporal starts a dev server on free loopback ports with its state in
// a SQLite file under dir, opened with the given pragmas, and waits until
// its default namespace answers.
func startTemporal(ctx context.Context, binary, dir string, pragmas []string) (*temporalServer, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "temporal.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	s := &temporalServer{addr: "127.0.0.1:" + strconv.Itoa(ports[0]), log: logPath, exited: make(chan struct{})}
	// Not CommandContext: stop ends it, with a grace period, on every path.
	args := []string{"server", "start-dev", "--headless", "--log-level", "warn",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
		"--http-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]),
		"--db-filename", filepath.Join(dir, "temporal.db")}
	for _, p := range pragmas {
		args = append(args, "--sqlite-pragma", p)
	}
	s.cmd = exec.Command(binary, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.awaitReady(ctx, 90*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitReady polls the frontend until the default namespace is described.
func (s *temporalServer) awaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("temporal dev server exited during start-up (%s); see %s", s.cmd.ProcessState, s.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporal dev server not ready after %s: %w; see %s", timeout, err, s.log)
		}
	}
}

func (s *temporalServer) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: s.addr, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.WorkflowService().DescribeNamespace(ctx, describeDefault())
	return err
}

// stop ends the server's process group: SIGTERM, then SIGKILL after a
// grace period.
func (s *temporalServer) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = signalGroup(s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
		return
	case <-time.After(10 * time.Second):
	}
	_ = signalGroup(s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var (
		ports []int
		lns   []net.Listener
	)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

package test

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopEndsTheServeOfItsDataDirectoryOnly: `countersign stop` ends the
// serve that holds the data directory's lock (gracefully, or with SIGKILL
// under --kill) and no other, and says so when none runs there.
func TestStopEndsTheServeOfItsDataDirectoryOnly(t *testing.T) {
	data, other := t.TempDir(), t.TempDir()
	p := startServe(t, data)
	bystander := startServe(t, other)

	if out, err := p.cli("stop", "--data", data, "--kill"); err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("stop --kill: %v\n%s", err, out)
	}
	select {
	case err := <-p.exit:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the serve ended with %v, want SIGKILL", err)
		}
		p.exit <- err
	case <-time.After(time.Minute):
		t.Fatal("the serve still runs after stop --kill")
	}
	select {
	case err := <-bystander.exit:
		t.Fatalf("stop ended the serve of another data directory: %v", err)
	default:
	}
	out, err := p.cli("stop", "--data", data)
	if err == nil || !strings.Contains(out, "no countersign serve runs on "+data) {
		t.Errorf("stop with nothing running: %v\n%s", err, out)
	}

	if out, err := bystander.cli("stop", "--data", other); err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	select {
	case err := <-bystander.exit:
		if err != nil {
			t.Errorf("a graceful stop ended the serve with %v, want exit status 0", err)
		}
		bystander.exit <- err
	case <-time.After(time.Minute):
		t.Fatal("the serve still runs after stop")
	}
}

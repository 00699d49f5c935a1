package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// cmdStop stops the serve that owns a data directory: the PID comes from
// the directory's lock, which only a running serve holds, so a stale
// serve.json or a reused PID never makes it signal another process.
func cmdStop(args []string, out io.Writer) error {
	fs := newFlagSet("stop", out)
	data := fs.String("data", "", "data directory of the serve to stop (default ./data, or COUNTERSIGN_DATA)")
	kill := fs.Bool("kill", false, "SIGKILL instead of a graceful stop (SIGTERM): what a crash does")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for it to end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("stop: unexpected %q", fs.Arg(0))
	}
	dir := firstNonEmpty(*data, os.Getenv("COUNTERSIGN_DATA"), "./data")
	pid, err := servePID(dir)
	if err != nil {
		return err
	}
	sig, how := syscall.SIGTERM, "stopping"
	if *kill {
		sig, how = syscall.SIGKILL, "killing"
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("stop: signal PID %d: %w", pid, err)
	}
	fmt.Fprintf(out, "%s countersign serve (PID %d) of %s\n", how, pid, dir)
	deadline := time.Now().Add(*timeout)
	for {
		// The kernel releases the lock when the process ends, however it
		// ends; polling it is how another process learns that it has.
		if _, err := servePID(dir); err != nil {
			fmt.Fprintln(out, "stopped")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stop: PID %d still holds %s after %s (stop --kill ends it at once)", pid, dir, *timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// servePID is the PID of the serve that holds dir's lock, or an error
// saying that none does.
func servePID(dir string) (int, error) {
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("stop: %w", err)
	}
	release, err := lockDataDir(dir)
	if err == nil {
		release()
		return 0, fmt.Errorf("stop: no countersign serve runs on %s", dir)
	}
	var inUse *DataDirInUseError
	if !errors.As(err, &inUse) {
		return 0, err
	}
	if inUse.PID == 0 {
		return 0, fmt.Errorf("stop: a countersign serve holds %s but has not written its PID yet; try again", dir)
	}
	return inUse.PID, nil
}

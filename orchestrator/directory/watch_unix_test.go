//go:build unix

package directory_test

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/countersign/countersign/orchestrator/directory"
)

func TestSignalReloads(t *testing.T) {
	path := writeFile(t, v1)
	w, ch := watch(t, directory.WatchConfig{Path: path, Interval: -1, Signals: []os.Signal{syscall.SIGHUP}})
	// The same modification time and size: only a signal (or Reload) sees it.
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	same := strings.Replace(v1, "alice", "alicE", 1)
	if err := os.WriteFile(path, []byte(same), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if r := next(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
	if _, ok := w.Current().User("alicE"); !ok {
		t.Fatal("the signal did not reload the file")
	}
}

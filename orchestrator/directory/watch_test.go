package directory_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/orchestrator/directory"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "directory.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// rewrite replaces the file atomically, as careful editors and deploy tools
// do, and moves its modification time forward, so a poll sees the change
// whatever the file system's time resolution.
func rewrite(t *testing.T, path, content string, step int) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Duration(step) * time.Hour)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

type reload struct {
	d   *directory.Directory
	err error
}

func watch(t *testing.T, cfg directory.WatchConfig) (*directory.Watcher, chan reload) {
	t.Helper()
	ch := make(chan reload, 16)
	cfg.OnReload = func(d *directory.Directory, err error) { ch <- reload{d, err} }
	w, err := directory.Watch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, ch
}

func next(t *testing.T, ch chan reload) reload {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
		return reload{}
	}
}

const (
	v1      = "users:\n  - {id: alice, groups: [finance]}\n"
	v2      = "users:\n  - {id: alice, groups: [finance]}\n  - {id: bob, groups: [finance]}\n"
	invalid = "users:\n  - {id: alice, groups: [finance]}\n  - {id: alice}\n"
)

func TestWatchRequiresAValidFile(t *testing.T) {
	if _, err := directory.Watch(context.Background(), directory.WatchConfig{Path: writeFile(t, invalid)}); err == nil ||
		!strings.Contains(err.Error(), `:3: users[1] (alice): id "alice" is also`) {
		t.Fatalf("Watch of an invalid file: %v", err)
	}
	if _, err := directory.Watch(context.Background(), directory.WatchConfig{}); err == nil {
		t.Fatal("Watch without a path")
	}
}

func TestReloadSwitchesOrKeeps(t *testing.T) {
	path := writeFile(t, v1)
	w, ch := watch(t, directory.WatchConfig{Path: path, Interval: -1})
	first := w.Current()
	if first.Len() != 1 {
		t.Fatalf("initial directory has %d users", first.Len())
	}
	// Unchanged content: nothing happens.
	if err := w.Reload(); err != nil || w.Current() != first {
		t.Fatalf("reload of the same content: %v", err)
	}
	// Valid → switches.
	rewrite(t, path, v2, 1)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := next(t, ch); r.err != nil || r.d != w.Current() || w.Current().Len() != 2 {
		t.Fatalf("after a valid change: %+v, %d users", r, w.Current().Len())
	}
	second := w.Current()
	// Invalid → keeps the old one, says why.
	rewrite(t, path, invalid, 2)
	err := w.Reload()
	if err == nil || !strings.Contains(err.Error(), path+":3:") || w.Current() != second {
		t.Fatalf("after an invalid change: %v", err)
	}
	if r := next(t, ch); r.err == nil || r.d != nil {
		t.Fatalf("reload report: %+v", r)
	}
	// A missing file keeps it too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err == nil || w.Current() != second {
		t.Fatalf("after removal: %v", err)
	}
	next(t, ch)
	// Fixed again → switches.
	rewrite(t, path, v1, 3)
	if err := w.Reload(); err != nil || w.Current().Len() != 1 {
		t.Fatalf("after the fix: %v", err)
	}
}

func TestPollSeesChanges(t *testing.T) {
	path := writeFile(t, v1)
	w, ch := watch(t, directory.WatchConfig{Path: path, Interval: time.Millisecond})
	rewrite(t, path, v2, 1)
	if r := next(t, ch); r.err != nil || r.d.Len() != 2 || w.Current() != r.d {
		t.Fatalf("poll after a valid change: %+v", r)
	}
	rewrite(t, path, invalid, 2)
	if r := next(t, ch); r.err == nil || w.Current().Len() != 2 {
		t.Fatalf("poll after an invalid change: %+v", r)
	}
	// The same invalid content is reported once, not on every poll; the
	// next report is the fix.
	rewrite(t, path, invalid, 3)
	rewrite(t, path, v1, 4)
	if r := next(t, ch); r.err != nil || r.d.Len() != 1 {
		t.Fatalf("poll after the fix: %+v", r)
	}
}

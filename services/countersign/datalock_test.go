package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second serve on a data directory another serve holds refuses at once,
// names the holder, and writes nothing under the directory.
func TestServeRefusesALockedDataDirectory(t *testing.T) {
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The holder is a serve that published its API.
	if err := writeJSON(filepath.Join(dir, fileServe), serveInfo{URL: "http://127.0.0.1:18080", PID: os.Getpid()}, 0o600); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, dir)

	fc := defaultConfig()
	fc.Data, fc.Addr, fc.NATS.Listen = dir, "127.0.0.1:0", "off"
	cfg := serveConfig{fileConfig: fc}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Guard: a serve that does not refuse would run until the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = serve(ctx, cfg, slog.New(slog.DiscardHandler), out)
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("serve on a locked data directory: %v, want ErrDataDirInUse", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("PID %d", os.Getpid()), "http://127.0.0.1:18080"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}
	if after := listDir(t, dir); after != before {
		t.Errorf("the refused serve wrote under the data directory: %s, before %s", after, before)
	}

	// Once released, the directory can be locked again.
	release()
	release2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release2()
}

// listDir names the entries of dir with their sizes.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%d ", e.Name(), info.Size())
	}
	return b.String()
}

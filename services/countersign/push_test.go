package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/orchestrator/directory"
)

func TestServeGeneratesAVAPIDKeyOnceAndKeepsItPrivate(t *testing.T) {
	t.Setenv("COUNTERSIGN_VAPID_PRIVATE_KEY", "")
	cfg := serveConfig{}
	cfg.Data = t.TempDir()
	cfg.Notify.Push = &pushConfig{Subject: "mailto:ops@example.com", QuietHours: map[string]string{"alice": "22:00-07:00 Europe/Berlin"}}
	log := slog.New(slog.DiscardHandler)
	p := &notifierParts{}
	if err := buildPush(cfg, "https://cs.example.com", nil, log, p); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.Data, fileVAPIDKey)
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, info.Mode())
	}
	if len(p.channels) != 1 || p.push.PublicKey == "" || p.push.Actions == nil {
		t.Fatalf("parts: %d channels, push %+v", len(p.channels), p.push)
	}
	again := &notifierParts{}
	if err := buildPush(cfg, "https://cs.example.com", nil, log, again); err != nil || again.push.PublicKey != p.push.PublicKey {
		t.Fatalf("a second start has key %q (%v), want the first's", again.push.PublicKey, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := buildPush(cfg, "https://cs.example.com", nil, log, &notifierParts{}); err == nil {
		t.Fatal("a VAPID key readable by others was used")
	}
	k, _ := push.GenerateVAPIDKey()
	t.Setenv("COUNTERSIGN_VAPID_PRIVATE_KEY", k)
	env := &notifierParts{}
	if err := buildPush(cfg, "https://cs.example.com", nil, log, env); err != nil {
		t.Fatal(err)
	}
	v, _ := push.NewVAPID(k, "mailto:ops@example.com")
	if env.push.PublicKey != v.PublicKey() {
		t.Fatal("the environment's key does not win over the data directory's")
	}
	cfg.Notify.Push.QuietHours = map[string]string{"bob": "late"}
	if err := buildPush(cfg, "https://cs.example.com", nil, log, &notifierParts{}); err == nil {
		t.Fatal("bad quiet hours were accepted")
	}
}

// liveDir is a directory a test replaces, as serve's watcher does.
type liveDir struct {
	d atomic.Pointer[directory.Directory]
}

func (l *liveDir) Current() *directory.Directory { return l.d.Load() }

// A person's quiet_hours in the directory are their push quiet hours,
// read live at each push: a reloaded directory counts at the next one.
func TestPushQuietHoursComeFromTheLiveDirectory(t *testing.T) {
	var dir liveDir
	set := func(src string) {
		d, err := directory.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		dir.d.Store(d)
	}
	set("users:\n  - {id: alice, quiet_hours: \"22:00-07:00 Europe/Berlin\"}\n  - {id: bob}\n")
	quiet := directoryQuiet(&dir)
	night := time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC) // midnight in Berlin
	if q, ok := quiet("alice"); !ok {
		t.Fatal("alice's quiet hours were not found")
	} else if on, _ := q.Active(night); !on {
		t.Fatal("alice is not quiet at midnight in Berlin")
	}
	if _, ok := quiet("bob"); ok {
		t.Fatal("bob has quiet hours; his entry sets none")
	}
	set("users:\n  - {id: alice}\n  - {id: bob, quiet_hours: \"12:00-13:00\"}\n")
	if _, ok := quiet("alice"); ok {
		t.Fatal("alice's removed quiet hours still count")
	}
	if q, ok := quiet("bob"); !ok || q.From != 12*60 {
		t.Fatalf("bob's new quiet hours: %+v %v", q, ok)
	}
	if directoryQuiet(nil) != nil {
		t.Fatal("without a directory there is nothing to ask")
	}
}

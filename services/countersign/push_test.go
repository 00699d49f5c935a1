package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/notifier/push"
)

func TestServeGeneratesAVAPIDKeyOnceAndKeepsItPrivate(t *testing.T) {
	t.Setenv("COUNTERSIGN_VAPID_PRIVATE_KEY", "")
	cfg := serveConfig{}
	cfg.Data = t.TempDir()
	cfg.Notify.Push = &pushConfig{Subject: "mailto:ops@example.com", QuietHours: map[string]string{"alice": "22:00-07:00 Europe/Berlin"}}
	log := slog.New(slog.DiscardHandler)
	p := &notifierParts{}
	if err := buildPush(cfg, "https://cs.example.com", log, p); err != nil {
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
	if err := buildPush(cfg, "https://cs.example.com", log, again); err != nil || again.push.PublicKey != p.push.PublicKey {
		t.Fatalf("a second start has key %q (%v), want the first's", again.push.PublicKey, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := buildPush(cfg, "https://cs.example.com", log, &notifierParts{}); err == nil {
		t.Fatal("a VAPID key readable by others was used")
	}
	k, _ := push.GenerateVAPIDKey()
	t.Setenv("COUNTERSIGN_VAPID_PRIVATE_KEY", k)
	env := &notifierParts{}
	if err := buildPush(cfg, "https://cs.example.com", log, env); err != nil {
		t.Fatal(err)
	}
	v, _ := push.NewVAPID(k, "mailto:ops@example.com")
	if env.push.PublicKey != v.PublicKey() {
		t.Fatal("the environment's key does not win over the data directory's")
	}
	cfg.Notify.Push.QuietHours = map[string]string{"bob": "late"}
	if err := buildPush(cfg, "https://cs.example.com", log, &notifierParts{}); err == nil {
		t.Fatal("bad quiet hours were accepted")
	}
}

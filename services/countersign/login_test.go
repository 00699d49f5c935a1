package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Where no sign-in can be kept (no home directory, no
// COUNTERSIGN_CONFIG_DIR), the CLI has none and goes on to the local
// development token; a damaged login.json is named, not ignored; a kept
// sign-in that has run out without a refresh token asks for a new login.
func TestLoginTokenLookup(t *testing.T) {
	t.Setenv("COUNTERSIGN_CONFIG_DIR", "")
	t.Setenv("HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	if tok, found, err := loginToken(context.Background(), "http://127.0.0.1:8080"); tok != "" || found || err != nil {
		t.Fatalf("without a home directory: %q %v %v, want none", tok, found, err)
	}

	dir := t.TempDir()
	t.Setenv("COUNTERSIGN_CONFIG_DIR", dir)
	if _, found, err := loginToken(context.Background(), "http://127.0.0.1:8080"); found || err != nil {
		t.Fatalf("no login.json: %v %v, want none", found, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "login.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loginToken(context.Background(), "http://127.0.0.1:8080"); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Fatalf("a damaged login.json: %v", err)
	}
	path := filepath.Join(dir, "login.json")
	if err := writeLogins(path, map[string]loginEntry{
		"https://cs.example.com":  {IDToken: "fresh", Expiry: time.Now().Add(time.Hour)},
		"https://old.example.com": {IDToken: "stale", Expiry: time.Now().Add(-time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("login.json: %v, want mode 0600", err)
	}
	if tok, found, err := loginToken(context.Background(), "https://cs.example.com"); tok != "fresh" || !found || err != nil {
		t.Fatalf("a kept sign-in: %q %v %v", tok, found, err)
	}
	if _, found, err := loginToken(context.Background(), "https://old.example.com"); !found || err == nil || !strings.Contains(err.Error(), "run 'countersign login' again") {
		t.Fatalf("a sign-in that ran out without a refresh token: %v %v", found, err)
	}
	if _, found, _ := loginToken(context.Background(), "https://other.example.com"); found {
		t.Fatal("another server's sign-in was used")
	}
}

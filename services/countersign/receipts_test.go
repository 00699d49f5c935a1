package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts/receipt"
)

// The first start generates the key under the data directory, readable by
// its owner only; the next start signs with the same key; a key file others
// can read is refused.
func TestReceiptKeyGeneratedOnFirstStart(t *testing.T) {
	cfg := serveConfig{fileConfig: defaultConfig()}
	cfg.Data = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := loadReceiptKeys(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.Data, fileReceiptKeys)
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v, mode %v; want 0600", err, info.Mode().Perm())
	}
	again, err := loadReceiptKeys(cfg, log)
	if err != nil || again.signer.KeyID() != first.signer.KeyID() || again.public.Len() != 1 {
		t.Fatalf("second start: %v, kid %s want %s", err, again.signer.KeyID(), first.signer.KeyID())
	}
	// An API-only process with public keys configured holds no signer.
	pub := filepath.Join(t.TempDir(), "jwks.json")
	data, _ := jsonMarshal(first.public.JWKS())
	if err := os.WriteFile(pub, data, 0o644); err != nil {
		t.Fatal(err)
	}
	apiOnly := cfg
	apiOnly.Roles = []string{roleAPI}
	apiOnly.Data = t.TempDir()
	apiOnly.Receipts.PublicKeys = pub
	got, err := loadReceiptKeys(apiOnly, log)
	if err != nil || got.signer != nil || got.public.Len() != 1 {
		t.Fatalf("API-only: %v, signer %v, %d keys", err, got.signer, got.public.Len())
	}
	if _, err := os.Stat(filepath.Join(apiOnly.Data, fileReceiptKeys)); !os.IsNotExist(err) {
		t.Fatal("an API-only process generated a private key")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadReceiptKeys(cfg, log); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key file others can read: %v", err)
	}
}

// COUNTERSIGN_RECEIPT_KEYS wins over the file: the first key signs, the
// others verify (a rotation).
func TestReceiptKeysFromTheEnvironment(t *testing.T) {
	a, _ := receipt.GenerateKey()
	b, _ := receipt.GenerateKey()
	data, err := receipt.MarshalPrivateJWKS([]receipt.PrivateKey{b, a})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("COUNTERSIGN_RECEIPT_KEYS", string(data))
	cfg := serveConfig{fileConfig: defaultConfig()}
	cfg.Data = t.TempDir()
	got, err := loadReceiptKeys(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got.signer.KeyID() != b.ID || strings.Join(got.public.IDs(), ",") != b.ID+","+a.ID {
		t.Fatalf("signs with %s, publishes %v", got.signer.KeyID(), got.public.IDs())
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

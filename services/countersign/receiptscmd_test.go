package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts/receipt"
)

// A rotation with the CLI: keygen --into puts each new key first in the
// private file (0600) and its public half first in the public file; serve
// signs with the newest, and the old key's receipts still verify with the
// public file; 'receipts public' prints the same public keys.
func TestKeygenRotates(t *testing.T) {
	dir := t.TempDir()
	keys, pub := filepath.Join(dir, "keys.json"), filepath.Join(dir, "public.json")
	var out bytes.Buffer
	if err := run([]string{"receipts", "keygen"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if ks, err := receipt.ParsePrivateJWKS(out.Bytes()); err != nil || len(ks) != 1 {
		t.Fatalf("keygen prints %v: %s", err, out.String())
	}
	load := func() *receiptKeys {
		t.Helper()
		cfg := serveConfig{fileConfig: defaultConfig()}
		cfg.Data, cfg.Roles = t.TempDir(), []string{roleArbiter}
		cfg.Receipts.Keys = keys
		rk, err := loadReceiptKeys(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return rk
	}
	var kids []string
	for range 2 {
		out.Reset()
		if err := run([]string{"receipts", "keygen", "--into", keys, "--public", pub}, &out, &out); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, load().signer.KeyID())
		if !strings.Contains(out.String(), kids[len(kids)-1]) {
			t.Fatalf("keygen does not name the new key:\n%s", out.String())
		}
	}
	if kids[0] == kids[1] {
		t.Fatal("the second keygen did not put a new key first")
	}
	if info, err := os.Stat(keys); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v %v", err, info.Mode())
	}
	data, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	set, err := receipt.ParseJWKS(data)
	if err != nil || strings.Join(set.IDs(), ",") != kids[1]+","+kids[0] {
		t.Fatalf("public file %v: %v, want %s then %s", err, set.IDs(), kids[1], kids[0])
	}
	if strings.Contains(string(data), `"d"`) {
		t.Fatal("the public file holds a private key")
	}
	out.Reset()
	if err := run([]string{"receipts", "public", keys}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if printed, err := receipt.ParseJWKS(out.Bytes()); err != nil || strings.Join(printed.IDs(), ",") != strings.Join(set.IDs(), ",") || strings.Contains(out.String(), `"d"`) {
		t.Fatalf("receipts public: %v\n%s", err, out.String())
	}
	// A receipt signed with the older key verifies with the public file.
	priv, err := readPrivateKeyFile(keys)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := receipt.NewSigner(receipt.SignerConfig{Key: priv[1]})
	tok, err := old.Sign(receipt.Claims{Agent: "a", Tool: "t", ArgsSHA256: strings.Repeat("0", 64), Basis: receipt.BasisApproval})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Inspect(context.Background(), tok, receipt.Options{Keys: set}); err != nil {
		t.Fatalf("the old key's receipt: %v", err)
	}
}

// Which process holds which key: the API signs with its own keys
// (COUNTERSIGN_RECEIPT_API_KEYS or receipts.api_keys) and publishes them
// with the arbiter's; the arbiter never reads them; in one process with
// no API keys the API signs with the arbiter's key.
func TestAPIReceiptKeys(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	arb, _ := receipt.GenerateKey()
	apiKey, _ := receipt.GenerateKey()
	pubFile := filepath.Join(t.TempDir(), "public.json")
	pubData, _ := jsonMarshal(receipt.NewKeySet(arb).JWKS())
	if err := os.WriteFile(pubFile, pubData, 0o644); err != nil {
		t.Fatal(err)
	}
	apiData, _ := receipt.MarshalPrivateJWKS([]receipt.PrivateKey{apiKey})
	apiFile := filepath.Join(t.TempDir(), "api-keys.json")
	if err := os.WriteFile(apiFile, apiData, 0o600); err != nil {
		t.Fatal(err)
	}

	apiOnly := serveConfig{fileConfig: defaultConfig()}
	apiOnly.Data, apiOnly.Roles = t.TempDir(), []string{roleAPI}
	apiOnly.Receipts.PublicKeys, apiOnly.Receipts.APIKeys = pubFile, apiFile
	got, err := loadReceiptKeys(apiOnly, log)
	if err != nil {
		t.Fatal(err)
	}
	if got.signer != nil || got.apiSigner == nil || got.apiSigner.KeyID() != apiKey.ID || strings.Join(got.public.IDs(), ",") != arb.ID+","+apiKey.ID {
		t.Fatalf("API replica: signer %v, API signer %v, publishes %v", got.signer, got.apiSigner, got.public.IDs())
	}
	if _, err := os.Stat(filepath.Join(apiOnly.Data, fileReceiptKeys)); !os.IsNotExist(err) {
		t.Fatal("an API replica generated an arbiter key")
	}
	if err := os.Chmod(apiFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadReceiptKeys(apiOnly, log); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("an API key file others can read: %v", err)
	}

	t.Setenv("COUNTERSIGN_RECEIPT_API_KEYS", string(apiData))
	arbOnly := serveConfig{fileConfig: defaultConfig()}
	arbOnly.Data, arbOnly.Roles = t.TempDir(), []string{roleArbiter}
	if got, err := loadReceiptKeys(arbOnly, log); err != nil || got.apiSigner != nil || got.signer == nil || got.signer.KeyID() == apiKey.ID {
		t.Fatalf("arbiter replica: %v, API signer %v", err, got.apiSigner)
	}
	t.Setenv("COUNTERSIGN_RECEIPT_API_KEYS", "")

	embedded := serveConfig{fileConfig: defaultConfig()}
	embedded.Data = t.TempDir()
	if got, err := loadReceiptKeys(embedded, log); err != nil || got.apiSigner == nil || got.apiSigner.KeyID() != got.signer.KeyID() {
		t.Fatalf("one process: %v, API signs with %v", err, got.apiSigner)
	}
}

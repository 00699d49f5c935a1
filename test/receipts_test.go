package test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/test/toolservice"
)

// approvedReceipt reviews a call, approves it with the CLI and claims it;
// it returns the receipt of the claim answer.
func approvedReceipt(t *testing.T, p *serveProc, run, tool, args string) string {
	t.Helper()
	var rev struct {
		Results []struct {
			Verdict string `json:"verdict"`
			EventID string `json:"event_id"`
		} `json:"results"`
	}
	body := map[string]any{
		"run":        map[string]any{"id": run, "agent": "billing-bot", "requested_by": "carol"},
		"tool_calls": []map[string]any{{"id": "call-1", "name": tool, "arguments": json.RawMessage(args)}},
	}
	if st := p.call("POST", "/v1/reviews", body, &rev); st != 200 || len(rev.Results) != 1 || rev.Results[0].EventID == "" {
		t.Fatalf("review: %d %+v", st, rev)
	}
	id := rev.Results[0].EventID
	if out, err := p.cli("approvals", "approve", id); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	var claimed struct {
		Record contracts.Record `json:"record"`
	}
	for {
		st := p.call("POST", "/v1/approvals/"+id+"/claim", map[string]string{"claim_id": "claim-" + run}, &claimed)
		if st == 200 {
			break
		}
		if st != 409 && st != 202 {
			t.Fatalf("claim: %d", st)
		}
		var rec struct{ Record contracts.Record }
		p.call("GET", "/v1/approvals/"+id+"?wait=5s", nil, &rec)
	}
	if claimed.Record.Claim == nil || claimed.Record.Claim.Receipt == "" {
		t.Fatalf("claim answer without a receipt: %+v", claimed.Record.Claim)
	}
	return claimed.Record.Claim.Receipt
}

func callTool(t *testing.T, url, tool, receiptHeader, args string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/"+tool, bytes.NewReader([]byte(args)))
	if receiptHeader != "" {
		req.Header.Set(receipt.Header, receiptHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

// TestToolServiceEnforcesReceipts runs the example tool service against a
// real `countersign serve`: it runs a payment only with the receipt of its
// approval, for its exact arguments, once; and a key rotation keeps old
// receipts valid until the old key is removed.
func TestToolServiceEnforcesReceipts(t *testing.T) {
	data := t.TempDir()
	// One address across restarts: the tool fetches the keys from it.
	addr := freeAddr(t)
	p := startServe(t, data, "--addr", addr)
	keyFile := filepath.Join(data, "receipt-keys.json")
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("receipt key file: %v %v, want mode 0600", err, info)
	}
	svc, err := toolservice.New(toolservice.Config{JWKSURL: p.url + "/.well-known/jwks.json", KeysTTL: time.Millisecond, KeysRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tool := httptest.NewServer(svc)
	defer tool.Close()

	args := `{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`
	rcpt := approvedReceipt(t, p, "pay-1", "payments.send", args)
	forger, _ := receipt.GenerateKey()
	signer, _ := receipt.NewSigner(receipt.SignerConfig{Key: forger})
	sha, _ := contracts.ArgumentsSHA256([]byte(args))
	forged, _ := signer.Sign(receipt.Claims{Agent: "billing-bot", Tool: "payments.send", ArgsSHA256: sha, Basis: receipt.BasisApproval})
	for _, c := range []struct {
		name, tool, receipt, args string
		status                    int
		code                      string
	}{
		{"no receipt", "payments.send", "", args, 401, "receipt_missing"},
		{"one byte changed", "payments.send", rcpt, strings.Replace(args, "1250", "1251", 1), 403, "receipt_arguments_differ"},
		{"another tool", "payments.refund", rcpt, args, 403, "receipt_wrong_tool"},
		{"signed with a key Countersign never published", "payments.send", forged, args, 401, "receipt_unknown_key"},
		{"valid", "payments.send", rcpt, args, 200, ""},
		{"replayed", "payments.send", rcpt, args, 409, "receipt_replayed"},
	} {
		if st, code := callTool(t, tool.URL, c.tool, c.receipt, c.args); st != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, code, c.status, c.code)
		}
	}
	if n := len(svc.Ran()); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}

	// Rotation: a receipt issued with the old key and not used yet; then a
	// new key goes first in the key file (it signs), the old one stays.
	oldRcpt := approvedReceipt(t, p, "pay-2", "payments.send", args)
	p.kill()
	oldKeys := readKeys(t, keyFile)
	added, _ := receipt.GenerateKey()
	writeKeys(t, keyFile, append([]receipt.PrivateKey{added}, oldKeys...))
	p = startServe(t, data, "--addr", addr)
	newRcpt := approvedReceipt(t, p, "pay-3", "payments.send", args)
	if kid := headerKid(t, newRcpt); kid != added.ID {
		t.Fatalf("signed with %s after the rotation, want the added key %s", kid, added.ID)
	}
	if st, code := callTool(t, tool.URL, "payments.send", newRcpt, args); st != 200 {
		t.Fatalf("receipt of the added key: %d %s", st, code)
	}
	// The old key removed: its unused receipt no longer runs anything.
	p.kill()
	writeKeys(t, keyFile, []receipt.PrivateKey{added})
	startServe(t, data, "--addr", addr)
	if st, code := callTool(t, tool.URL, "payments.send", oldRcpt, args); st != 401 || code != "receipt_unknown_key" {
		t.Fatalf("receipt of the removed key: %d %s, want 401 receipt_unknown_key", st, code)
	}
	if n := len(svc.Ran()); n != 2 {
		t.Fatalf("the tool ran %d times, want twice", n)
	}
}

// TestOldKeyVerifiesUntilRemoved: during a rotation a receipt of the old
// key still runs.
func TestOldKeyVerifiesUntilRemoved(t *testing.T) {
	data := t.TempDir()
	p := startServe(t, data)
	keyFile := filepath.Join(data, "receipt-keys.json")
	args := `{"amount":7,"currency":"EUR","recipient":"Initech"}`
	oldRcpt := approvedReceipt(t, p, "pay-old", "payments.send", args)
	p.kill()
	added, _ := receipt.GenerateKey()
	writeKeys(t, keyFile, append([]receipt.PrivateKey{added}, readKeys(t, keyFile)...))
	p = startServe(t, data)
	svc, err := toolservice.New(toolservice.Config{JWKSURL: p.url + "/.well-known/jwks.json"})
	if err != nil {
		t.Fatal(err)
	}
	tool := httptest.NewServer(svc)
	defer tool.Close()
	if st, code := callTool(t, tool.URL, "payments.send", oldRcpt, args); st != 200 {
		t.Fatalf("receipt of the old key during the rotation: %d %s", st, code)
	}
}

func readKeys(t *testing.T, path string) []receipt.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := receipt.ParsePrivateJWKS(data)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func writeKeys(t *testing.T, path string, keys []receipt.PrivateKey) {
	t.Helper()
	data, err := receipt.MarshalPrivateJWKS(keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func headerKid(t *testing.T, tok string) string {
	t.Helper()
	var h struct{ Kid string }
	b, err := base64URLDecode(strings.Split(tok, ".")[0])
	if err != nil || json.Unmarshal(b, &h) != nil {
		t.Fatalf("header of %s: %v", tok, err)
	}
	return h.Kid
}

func base64URLDecode(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

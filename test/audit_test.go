package test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
)

// TestAuditBundleOfAKilledServerVerifies: a server killed with SIGKILL
// twice, its approvals decided across the restarts, exports an audit log
// that verifies against its published keys with every entry signed, holds
// no tool arguments, and an altered copy is refused with the entry named.
func TestAuditBundleOfAKilledServerVerifies(t *testing.T) {
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "countersign.yaml")
	if err := os.WriteFile(cfg, []byte("audit:\n  checkpoint_every: 3\n  checkpoint_interval: 200ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, data, "--config", cfg)
	var first reviewAnswer
	if code := p.call("POST", "/v1/reviews", reviewBody("run-audit"), &first); code != 200 {
		t.Fatalf("review: %d", code)
	}
	ids := map[string]string{}
	for _, r := range first.Results {
		ids[r.ToolCallID] = r.EventID
	}
	p.kill() // the requests are stored, the records may not exist yet

	p2 := startServe(t, data, "--config", cfg)
	for _, id := range []string{ids["pay"], ids["mail"], ids["drop"]} {
		p2.waitExists(id)
	}
	if out, err := p2.cli("approvals", "approve", ids["pay"]); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	p2.kill()
	p3 := startServe(t, data, "--config", cfg)
	if out, err := p3.cli("approvals", "reject", ids["mail"], "--reason", "not to the CEO"); err != nil {
		t.Fatalf("reject: %v %s", err, out)
	}

	dir := t.TempDir()
	keys := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(keys, p3.get("/.well-known/jwks.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The entries of the last decision are signed within the interval.
	bundle := filepath.Join(dir, "audit.jsonl")
	rep := p3.exportSigned(bundle, keys, 5) // 3 created, 2 decided
	if rep.Entries < 5 || rep.Unsigned != 0 || rep.Checkpoints == 0 {
		t.Fatalf("report %+v: want at least 5 entries, all signed", rep)
	}
	raw, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"x@example.com", "payments.send", "users", "not to the CEO"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the bundle holds %q: entries must not carry arguments, tools or comments", secret)
		}
	}
	if out, err := p3.cli("audit", "verify", bundle, "--keys", keys); err != nil || !strings.Contains(out, "OK: no entry altered") {
		t.Fatalf("audit verify of the export: %v\n%s", err, out)
	}

	// One byte of the entry of the rejection changed.
	lines := strings.Split(string(raw), "\n")
	altered := -1
	for i, l := range lines {
		if strings.Contains(l, `"change":"decided"`) && strings.Contains(l, ids["mail"]) {
			lines[i] = strings.Replace(l, `"status":"rejected"`, `"status":"approved"`, 1)
			altered = i
		}
	}
	if altered < 0 {
		t.Fatal("no decided entry for the rejected approval")
	}
	tampered := filepath.Join(dir, "tampered.jsonl")
	if err := os.WriteFile(tampered, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := p3.cli("audit", "verify", tampered, "--keys", keys)
	if err == nil || !strings.Contains(out, "("+ids["mail"]+") altered") {
		t.Fatalf("audit verify of an altered bundle: %v\n%s", err, out)
	}
}

// get answers GET path without a token.
func (p *serveProc) get(path string) []byte {
	p.t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		p.t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return b
}

// exportSigned exports the audit log with the CLI into file until it holds
// at least want entries, every one signed, and returns its report.
func (p *serveProc) exportSigned(file, keys string, want int) *audit.Report {
	p.t.Helper()
	data, err := os.ReadFile(keys)
	if err != nil {
		p.t.Fatal(err)
	}
	ks, err := receipt.ParseJWKS(data)
	if err != nil {
		p.t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		_ = os.Remove(file)
		if out, err := p.cli("audit", "export", "-o", file); err != nil {
			p.t.Fatalf("audit export: %v %s", err, out)
		}
		f, err := os.Open(file)
		if err != nil {
			p.t.Fatal(err)
		}
		_, rep, err := audit.Verify(context.Background(), f, ks)
		f.Close()
		if err != nil {
			p.t.Fatal(err)
		}
		if !rep.OK() {
			p.t.Fatalf("the export does not verify: %+v", rep.Problems)
		}
		if rep.Entries >= want && rep.Unsigned == 0 {
			return rep
		}
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("the export never had %d entries all signed: %+v", want, rep)
		}
	}
}

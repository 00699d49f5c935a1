package test

import (
	"net/http"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// TestMCPExamplesRun runs docs/mcp.md's examples that need no MCP server
// from npm: the label rules it shows are those of deploy/policies/mcp.yaml
// and deploy/policy.yaml (every field shown, as shown), and a server's Go
// verification of the receipt the gateway forwards with an approved call
// accepts the receipt of the claim, for the tool files.write_file.
func TestMCPExamplesRun(t *testing.T) {
	d := readDocExamples(t, "docs/mcp.md", "")

	// The rules shown are in the policies.
	var shown []map[string]any
	if err := yaml.Unmarshal([]byte(d.take(t, "yaml", "name: mcp-destructive").text), &shown); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"../deploy/policies/mcp.yaml", "../deploy/policy.yaml"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var pol struct {
			Rules []map[string]any `yaml:"rules"`
		}
		if err := yaml.Unmarshal(src, &pol); err != nil {
			t.Fatal(err)
		}
		for _, rule := range shown {
			var found map[string]any
			for _, r := range pol.Rules {
				if r["name"] == rule["name"] {
					found = r
				}
			}
			if found == nil {
				t.Errorf("%s has no rule %s, which docs/mcp.md shows", file, rule["name"])
				continue
			}
			for k, v := range rule {
				if !jsonEqual(found[k], v) {
					t.Errorf("%s: rule %s has %s %v; docs/mcp.md shows %v", file, rule["name"], k, found[k], v)
				}
			}
		}
	}

	// A server verifies the receipt of an approved write_file call.
	d.take(t, "go", "receipt.Verify(")
	p, _ := makeRunServe(t)
	args := `{"path":"/srv/notes.txt","content":"hello"}`
	r := reviewOne(t, p, map[string]any{"id": "mcp:carol@host:files", "agent": "mcp", "requested_by": "carol",
		"labels": map[string]string{"mcp.server": "files", "mcp.tool": "write_file", "mcp.destructiveHint": "true"}},
		map[string]any{"id": "call-1", "name": "files.write_file", "arguments": map[string]any{"path": "/srv/notes.txt", "content": "hello"}})
	if r["verdict"] != "pending" || r["rule"] != "mcp-destructive" {
		t.Fatalf("files.write_file: %v, want pending under mcp-destructive", r)
	}
	id := r["event_id"].(string)
	if code := p.call("POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	var claim struct {
		Record contracts.Record `json:"record"`
	}
	if code := p.call("POST", "/v1/approvals/"+id+"/claim", map[string]any{"claim_id": "gateway-1"}, &claim); code != http.StatusOK ||
		claim.Record.Claim == nil || claim.Record.Claim.Receipt == "" {
		t.Fatalf("claim: %d %+v, want the claim's receipt", code, claim.Record.Claim)
	}
	cmd := runGoExample(t, "goVerifyReceipt", "EX_URL="+p.url, "EX_TOOL=write_file", "EX_ARGS="+args,
		"EX_RECEIPT="+claim.Record.Claim.Receipt)
	out, err := cmd.CombinedOutput()
	if got := outputLines(t, out, err); len(got) != 1 || got[0] != "verified files.write_file "+id+" approval" {
		t.Errorf("the receipt check printed %s, want it verified for files.write_file and approval %s", fmtLines(got), id)
	}
	d.allRun(t)
}

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

const receiptsPolicy = `
version: "rcpt-1"
default: require_approval
rules:
  - name: reads
    tools: ["search_*"]
    action: allow
    receipt: true
  - name: lists
    tools: ["list_*"]
    action: allow
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice]
    grants: {scopes: [call, run], max_ttl: 1h}
`

// tool is what a tool verifying receipts holds: the API's published keys.
func (e *receiptEnv) tool(t *testing.T, bases ...string) receipt.Options {
	t.Helper()
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: e.url + "/.well-known/jwks.json", Client: e.client})
	if err != nil {
		t.Fatal(err)
	}
	return receipt.Options{Keys: keys, Replay: receipt.NewMemoryReplayStore(), Bases: bases}
}

// TestPolicyReceiptOverHTTP: a call a rule with receipt: true allows gets a
// receipt the API signs for the policy decision, which a tool verifies with
// the published keys; each review of the call gets a new one, good once.
// A rule without receipt: true gives none, and neither does a Go gate in
// the agent's own process.
func TestPolicyReceiptOverHTTP(t *testing.T) {
	e := setupReceiptsWith(t, receiptsPolicy, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "r-1", Agent: "research-bot", Tenant: "acme"}
	args := json.RawMessage(`{"q": "countersign", "limit": 5}`)
	review := func() []client.Result {
		res, err := e.agent.Review(ctx, run, []client.ToolCall{
			{ID: "s1", Name: "search_docs", Arguments: args},
			{ID: "l1", Name: "list_files", Arguments: json.RawMessage(`{}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := review()
	if res[0].Verdict != orchestrator.VerdictAllowed || res[0].Receipt == "" {
		t.Fatalf("search_docs under receipt: true: %+v", res[0])
	}
	if res[1].Verdict != orchestrator.VerdictAllowed || res[1].Receipt != "" {
		t.Fatalf("list_files under a rule without receipt: %+v", res[1])
	}
	tool := e.tool(t)
	c, err := receipt.Verify(ctx, res[0].Receipt, "search_docs", []byte(`{"limit":5,"q":"countersign"}`), tool)
	if err != nil {
		t.Fatal(err)
	}
	if c.Basis != receipt.BasisPolicy || c.Rule != "reads" || c.PolicyVersion != "rcpt-1" || c.EventID != "" ||
		c.RunID != "r-1" || c.ToolCallID != "s1" || c.Tenant != "acme" || c.Agent != "research-bot" || c.Grant != "" {
		t.Fatalf("claims %+v", c)
	}
	// Signed by the API's own key, not the arbiter's.
	if _, err := receipt.Verify(ctx, res[0].Receipt, "search_docs", args,
		receipt.Options{Keys: receipt.NewKeySet(e.key), Replay: receipt.NewMemoryReplayStore()}); !errors.Is(err, receipt.ErrUnknownKey) {
		t.Fatalf("verified with the arbiter's key alone: %v", err)
	}
	if _, err := receipt.Verify(ctx, res[0].Receipt, "search_docs", args, tool); !errors.Is(err, receipt.ErrReplayed) {
		t.Fatalf("second use: %v", err)
	}
	again := review()
	if again[0].Receipt == "" || again[0].Receipt == res[0].Receipt {
		t.Fatal("a call reviewed again got no new receipt")
	}
	if _, err := receipt.Verify(ctx, again[0].Receipt, "search_docs", args, tool); err != nil {
		t.Fatalf("the new receipt: %v", err)
	}
	// A tool that runs only what humans decided refuses it.
	if _, err := receipt.Verify(ctx, review()[0].Receipt, "search_docs", args, e.tool(t, receipt.BasisApproval, receipt.BasisGrant)); !errors.Is(err, receipt.ErrBasisNotAccepted) {
		t.Fatalf("policy receipt where humans must approve: %v", err)
	}

	// The library gate in the agent's process signs nothing.
	gate := countersigntest.Gate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator), orchestrator.StaticPolicy{P: countersigntest.Policy(t, receiptsPolicy)})
	vs, err := gate.Review(ctx, run, []orchestrator.ToolCall{{ID: "s2", Name: "search_docs", Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	if vs[0].Verdict != orchestrator.VerdictAllowed || vs[0].Permit.Claim(ctx) != nil || vs[0].Permit.Receipt() != "" {
		t.Fatalf("library gate: %+v receipt %q", vs[0], vs[0].Permit.Receipt())
	}
}

// TestNoReceiptWithoutAPIKey: an API that holds no signing key gives no
// receipt (the call is still allowed; a tool that requires receipts
// refuses it).
func TestNoReceiptWithoutAPIKey(t *testing.T) {
	e := setupReceiptsWith(t, receiptsPolicy, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.agent.Review(ctx, contracts.Run{Agent: "research-bot"}, []client.ToolCall{{ID: "s1", Name: "search_docs"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Verdict != orchestrator.VerdictAllowed || res[0].Receipt != "" {
		t.Fatalf("%+v", res[0])
	}
}

// TestGrantReceiptOverHTTP: a call a standing grant covers gets a receipt
// with basis grant naming the grant and who granted it, never outliving
// it; every covered call gets its own.
func TestGrantReceiptOverHTTP(t *testing.T) {
	e := setupReceiptsWith(t, receiptsPolicy, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "g-run", Agent: "billing-bot", Tenant: "acme", RequestedBy: "carol"}
	args := json.RawMessage(`{"amount": 30}`)
	first, err := e.agent.Review(ctx, run, []client.ToolCall{{ID: "c1", Name: "payments.send", Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"decision": "approve", "grant": map[string]any{"scope": "run", "ttl": "30m", "arguments": "same"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/approvals/"+first[0].EventID+"/votes", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.aliceToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("approve with a grant: %d %s", resp.StatusCode, b)
	}
	grantID := first[0].EventID
	// The arbiter writes the grant right after the record.
	awaitGrant(t, e.gate, grantID)
	covered, err := e.agent.Review(ctx, run, []client.ToolCall{{ID: "c2", Name: "payments.send", Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	if covered[0].GrantID != grantID || covered[0].Receipt == "" {
		t.Fatalf("covered call: %+v", covered[0])
	}
	humans := e.tool(t, receipt.BasisApproval, receipt.BasisGrant)
	c, err := receipt.Verify(ctx, covered[0].Receipt, "payments.send", args, humans)
	if err != nil {
		t.Fatal(err)
	}
	if c.Basis != receipt.BasisGrant || c.Grant != grantID || len(c.DecidedBy) != 1 || c.DecidedBy[0] != "alice" ||
		c.Rule != "payments" || c.PolicyVersion != "rcpt-1" || c.ToolCallID != "c2" || c.EventID != "" {
		t.Fatalf("claims %+v", c)
	}
	if _, err := receipt.Verify(ctx, covered[0].Receipt, "payments.send", args, humans); !errors.Is(err, receipt.ErrReplayed) {
		t.Fatalf("second use: %v", err)
	}
	if _, err := receipt.Verify(ctx, covered[0].Receipt, "payments.send", args, e.tool(t, receipt.BasisApproval)); !errors.Is(err, receipt.ErrBasisNotAccepted) {
		t.Fatalf("grant receipt where only approvals run: %v", err)
	}
	third, err := e.agent.Review(ctx, run, []client.ToolCall{{ID: "c3", Name: "payments.send", Arguments: args}})
	if err != nil || third[0].Receipt == "" || third[0].Receipt == covered[0].Receipt {
		t.Fatalf("another covered call: %+v %v", third, err)
	}
}

package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
)

// The attacker's tests of confidentiality across an edit, a resubmission
// and a claim, against a real `countersign serve`: a viewer, another
// approver, another agent, the webhook endpoint without include_sensitive
// and the notifier's and resolver's NATS users must learn no sensitive
// value an edit added, no hash that confirms a guess, and no receipt.

const editSecret = "DE-EDITED-SECRET-IBAN"

const editsPolicy = `version: "edits-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.send"]
    action: require_approval
    approvers: [alice, bob]
    allowed_decisions: [approve, reject, edit]
    sensitive: ["/iban", "/cvv"]
    channels: ["webhook:automation"]
`

type editsRig struct {
	a    *adversary
	hook *hookReceiver
}

func startEditsRig(t *testing.T) *editsRig {
	dir := t.TempDir()
	hook := newHookReceiver(t, 0)
	a := &adversary{t: t, dir: filepath.Join(dir, "directory.yaml"), tokens: map[string]string{}}
	var b strings.Builder
	b.WriteString("users:\n")
	for _, u := range []struct{ id, roles string }{
		{"alice", "[approver]"}, {"bob", "[approver]"}, {"vic", "[viewer]"},
		{"bot", "[agent]"}, {"bot2", "[agent]"}, {"root", "[admin]"},
	} {
		a.tokens[u.id] = newPerson(u.id, "").token
		sum := sha256.Sum256([]byte(a.tokens[u.id]))
		fmt.Fprintf(&b, "  - id: %s\n    tokens: [{sha256: %s, roles: %s}]\n", u.id, hex.EncodeToString(sum[:]), u.roles)
	}
	pol, cfg := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "countersign.yaml")
	for path, data := range map[string]string{
		a.dir: b.String(), pol: editsPolicy,
		cfg: fmt.Sprintf("notify:\n  webhooks:\n    - name: automation\n      url: %s/hooks/countersign\n      secrets: [env:E2E_WEBHOOK_SECRET]\n  retry: {attempts: 5, initial: 50ms, max: 200ms}\n", hook.srv.URL),
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("E2E_WEBHOOK_SECRET", hook.secret)
	data := t.TempDir()
	a.p = startServe(t, data, "--config", cfg, "--policy", pol, "--directory", a.dir)
	a.users = roleUsers(t, data)
	return &editsRig{a: a, hook: hook}
}

// get reads path as who and returns the body.
func (r *editsRig) get(who, path string) (int, string) {
	var raw json.RawMessage
	code := r.a.p.callAs(r.a.tokens[who], "GET", path, nil, &raw)
	return code, string(raw)
}

func hashOf(t *testing.T, args string) string {
	t.Helper()
	sha, err := contracts.ArgumentsSHA256([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func TestEditedSensitiveValuesHashesAndReceiptsStayWithThoseWhoMaySeeThem(t *testing.T) {
	r := startEditsRig(t)
	a := r.a
	const requested = `{"amount":10,"cvv":"123","recipient":"ACME"}`
	const edited = `{"amount":10,"cvv":"123","iban":"` + editSecret + `","recipient":"ACME"}`
	run := map[string]any{"id": "run-edits", "agent": "billing-bot"}
	call := func(args string) map[string]any {
		return map[string]any{"run": run, "tool_calls": []map[string]any{{"id": "pay-1", "name": "payments.send", "arguments": json.RawMessage(args)}}}
	}
	var ans reviewAnswer
	if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/reviews", call(requested), &ans); code != 200 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	a.waitRecord(id, func(rec *contracts.Record) bool { return rec.Request.EventID == id })
	var voted json.RawMessage
	if code := a.p.callAs(a.tokens["alice"], "POST", "/v1/approvals/"+id+"/votes",
		map[string]any{"decision": "edit", "arguments": json.RawMessage(edited)}, &voted); code != 200 && code != 202 {
		t.Fatalf("edit: %d %s", code, voted)
	}
	rec := a.waitRecord(id, func(rec *contracts.Record) bool { return rec.Terminal() })
	if rec.Status != contracts.StatusApproved || !strings.Contains(string(rec.Outcome.Arguments), editSecret) {
		t.Fatalf("outcome %s %s", rec.Status, rec.Outcome.Arguments)
	}
	leaks := []string{editSecret, `"123"`, hashOf(t, requested), hashOf(t, edited)}
	noLeak := func(where, body string) {
		t.Helper()
		for _, l := range leaks {
			if strings.Contains(body, l) {
				t.Errorf("%s shows %q:\n%s", where, l, body)
			}
		}
	}

	t.Run("the viewer's reads mask the edit and carry no hash", func(t *testing.T) {
		for _, path := range []string{"/v1/approvals/" + id, "/v1/approvals/" + id + "/events", "/v1/approvals?status=approved"} {
			code, body := r.get("vic", path)
			if code != 200 || !strings.Contains(body, id) {
				t.Fatalf("GET %s as vic: %d %s", path, code, body)
			}
			noLeak("GET "+path+" as vic", body)
		}
		// The approver still sees what was approved.
		if _, body := r.get("bob", "/v1/approvals/"+id); !strings.Contains(body, editSecret) {
			t.Fatalf("bob does not see the edit: %s", body)
		}
	})

	t.Run("the webhook without include_sensitive", func(t *testing.T) {
		d := r.hook.next("decided")
		if !strings.Contains(string(d.body), id) {
			t.Fatalf("decided delivery of another approval: %s", d.body)
		}
		noLeak("the decided webhook", string(d.body))
	})

	t.Run("a resubmission by another agent learns nothing", func(t *testing.T) {
		var right, wrong struct {
			Error struct{ Code string } `json:"error"`
		}
		cr := a.p.callAs(a.tokens["bot2"], "POST", "/v1/reviews", call(requested), &right)
		cw := a.p.callAs(a.tokens["bot2"], "POST", "/v1/reviews", call(`{"amount":10,"cvv":"999","recipient":"ACME"}`), &wrong)
		if cr != cw || right != wrong {
			t.Fatalf("the right guess is answered %d %+v, the wrong one %d %+v", cr, right, cw, wrong)
		}
		// The submitter itself is still told.
		if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/reviews", call(requested), &ans); code != 200 || ans.Results[0].EventID != id {
			t.Fatalf("the submitter's own resubmission: %d %+v", code, ans)
		}
	})

	t.Run("the receipt goes to the claimant alone", func(t *testing.T) {
		var claimed struct {
			Record contracts.Record `json:"record"`
		}
		if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/approvals/"+id+"/claim", map[string]string{"claim_id": "claim-edits"}, &claimed); code != 200 ||
			claimed.Record.Claim == nil || claimed.Record.Claim.Receipt == "" {
			t.Fatalf("claim: %d %+v", code, claimed.Record.Claim)
		}
		rcpt := claimed.Record.Claim.Receipt
		if _, body := r.get("bot", "/v1/approvals/"+id); !strings.Contains(body, rcpt) {
			t.Fatalf("the claimant's read has no receipt: %s", body)
		}
		for _, who := range []string{"vic", "alice", "bob", "root"} {
			if code, body := r.get(who, "/v1/approvals/"+id); code != 200 || strings.Contains(body, rcpt) {
				t.Fatalf("GET as %s: %d, shows the receipt: %v", who, code, strings.Contains(body, rcpt))
			}
		}
		// Another agent sending the same claim id is not answered with it.
		var again json.RawMessage
		if code := a.p.callAs(a.tokens["bot2"], "POST", "/v1/approvals/"+id+"/claim", map[string]string{"claim_id": "claim-edits"}, &again); code == 200 || strings.Contains(string(again), rcpt) {
			t.Fatalf("the same claim id as bot2: %d %s", code, again)
		}
		// The notifier's and the resolver's NATS users read records, never
		// receipts.
		for _, role := range []embedded.Role{embedded.RoleNotifier, embedded.RoleResolver} {
			js := a.js(role)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, id)
			if err != nil || strings.Contains(string(e.Value()), rcpt) {
				cancel()
				t.Fatalf("%s reads the record (%v) with the receipt in it", role, err)
			}
			if rk, err := js.KeyValue(ctx, contracts.BucketReceipts); err == nil {
				if _, err := rk.Get(ctx, id); err == nil {
					cancel()
					t.Fatalf("%s reads the receipt", role)
				}
			}
			cancel()
		}
	})
}

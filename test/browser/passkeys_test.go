package browser_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/services/api"
)

// passkeyPolicy has alice approve every payment, each approval signed
// with her passkey.
const passkeyPolicy = `version: "passkeys-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.send"]
    action: require_approval
    approvers: [alice]
    step_up: passkey
`

// paymentArgs are the arguments served.review proposes.
func paymentArgs(amount int) string {
	return fmt.Sprintf(`{"amount":%d,"currency":"EUR","recipient":"Globex GmbH"}`, amount)
}

// runServePasskeys starts the binary as built, every role with the
// embedded NATS server, with the step-up policy and a directory of alice
// (an approver) and billing-bot (an agent). Serve binds passkeys to its
// public URL, http://127.0.0.1:PORT, as rp_id localhost: the returned
// served's url is http://localhost:PORT, where the browser must open the
// inbox; its token is billing-bot's. The second value is alice's token.
func runServePasskeys(t *testing.T) (*served, string) {
	t.Helper()
	dir, data := t.TempDir(), t.TempDir()
	agent, agentHash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	alice, aliceHash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"directory.yaml": fmt.Sprintf(`users:
  - id: alice
    tokens: [{sha256: %q, roles: [approver]}]
  - id: billing-bot
    tokens: [{sha256: %q, roles: [agent]}]
`, aliceHash, agentHash),
		"policy.yaml":      passkeyPolicy,
		"countersign.yaml": "directory: directory.yaml\npolicy: policy.yaml\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(countersignBinary(t), "serve", "--data", data, "--addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--config", filepath.Join(dir, "countersign.yaml"))
	s := launch(t, cmd, agent)
	port, ok := strings.CutPrefix(s.url, "http://127.0.0.1:")
	if !ok {
		t.Fatalf("serve's inbox is at %s, not on 127.0.0.1", s.url)
	}
	s.url = "http://localhost:" + port
	return s, alice
}

// addAuthenticator gives the browser tab of ctx a virtual platform
// authenticator that verifies its user (as a fingerprint would) and keeps
// discoverable credentials.
func addAuthenticator(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	_, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
		Protocol: webauthn.AuthenticatorProtocolCtap2, Transport: webauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
	}})
	if err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
}

// stage runs steps within a minute; when they fail, the test fails with
// what the page shows.
func stage(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v; the page at:\n%s", what, err, shown)
	}
}

// record reads approval id as the agent.
func (s *served) record(t *testing.T, id string) contracts.Record {
	t.Helper()
	var ans struct {
		Record contracts.Record `json:"record"`
	}
	if code := s.call(t, http.MethodGet, "/v1/approvals/"+id, "", &ans); code != http.StatusOK {
		t.Fatalf("read %s: %d", id, code)
	}
	return ans.Record
}

// pendingPayment proposes a payment and returns its event id.
func (s *served) pendingPayment(t *testing.T, runID string, amount int) string {
	t.Helper()
	res := s.review(t, runID, "pay-1", amount)
	id, _ := res["event_id"].(string)
	if res["verdict"] != "pending" || id == "" {
		t.Fatalf("review: %+v", res)
	}
	return id
}

// refusedWith waits for the approval page's refusal and checks its reason
// and words.
func refusedWith(t *testing.T, ctx context.Context, reason string) {
	t.Helper()
	do(t, ctx, chromedp.WaitVisible(chromedp.ID("result-error")))
	if got := eval[string](t, ctx, `document.getElementById("result-error").getAttribute("data-reason")`); got != reason {
		t.Fatalf("refused with %q (%s), want %s", got, eval[string](t, ctx, `document.getElementById("result-error").textContent`), reason)
	}
	if text := eval[string](t, ctx, `document.getElementById("result-error").textContent`); !strings.Contains(text, contracts.Reason(reason).Message()) {
		t.Fatalf("the refusal says %q", text)
	}
}

// A person enrols a passkey on the inbox's Passkeys page in a real
// browser (a virtual authenticator stands in for the fingerprint reader),
// against the binary as built; an agent's payment that the rule says
// step_up: passkey is approved on its page, signed by that passkey; the
// agent claims it and gets a receipt, and a tool behind the receipt
// middleware, which requires one person's own signature from the
// published approvers document, runs it exactly once. An approval posted
// without a signature is refused step_up_required, and once the person
// revokes the passkey on the page, its signature is refused
// passkey_unknown and the page says no passkey is enrolled.
func TestBinaryPasskeyStepUpApprovalRunsTheToolOnce(t *testing.T) {
	axe(t)
	s, aliceToken := runServePasskeys(t)
	ctx := newBrowser(t, 4*time.Minute)
	addAuthenticator(t, ctx)

	stage(t, ctx, "sign in and enrol a passkey",
		chromedp.Navigate(s.url+"/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		typeInto(chromedp.ID("token"), aliceToken),
		click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("rows")),
		click(chromedp.ID("nav-passkeys")),
		chromedp.WaitVisible(chromedp.ID("no-passkeys")),
		until(`!document.getElementById("enrol-submit").disabled`),
		typeInto(chromedp.ID("passkey-name"), "laptop"),
		click(chromedp.ID("enrol-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#passkeys .passkey[data-revoked="false"]`)),
	)
	if got := eval[string](t, ctx, `document.querySelector("#passkeys .passkey .summary").textContent`); got != "laptop" {
		t.Fatalf("the enrolled passkey is named %q", got)
	}
	for _, v := range []viewport{desktop, phone} {
		do(t, ctx, v.apply(), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("enrol-form")))
		checkLooks(t, ctx, "passkeys ("+v.name+")")
		if v.phone {
			expect(t, ctx, "passkeys (phone)", phoneRules)
		}
	}
	do(t, ctx, desktop.apply())

	// The agent's payment is approved on its page: the browser signs.
	args := paymentArgs(1250)
	id := s.pendingPayment(t, "run-passkey-1", 1250)
	stage(t, ctx, "open the step-up approval",
		chromedp.Navigate(s.url+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.ID("step-up")),
		until(`!document.getElementById("approve").disabled`),
	)
	if text := eval[string](t, ctx, `document.getElementById("step-up-note").textContent`); !strings.Contains(text, "This rule asks you to sign with your passkey") {
		t.Fatalf("the approval page says %q", text)
	}
	if eval[bool](t, ctx, `document.getElementById("no-passkey") !== null`) {
		t.Fatal("the approval page says no passkey is enrolled")
	}
	checkLooks(t, ctx, "step-up approval (desktop)")
	stage(t, ctx, "approve, signed", click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("outcome")))
	rec := s.record(t, id)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Passkey == nil ||
		rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaWeb}) {
		t.Fatalf("record after the signed approval: %+v", rec)
	}

	// The agent claims it; the tool runs it once, on alice's signature.
	var claimed struct {
		Record contracts.Record `json:"record"`
	}
	if code := s.call(t, http.MethodPost, "/v1/approvals/"+id+"/claim", `{"claim_id":"claim-passkey-1"}`, &claimed); code != http.StatusOK ||
		claimed.Record.Claim == nil || claimed.Record.Claim.Receipt == "" {
		t.Fatalf("claim: %d %+v", code, claimed.Record.Claim)
	}
	tool, runs := receiptTool(t, s)
	if status, body := useReceipt(t, tool, claimed.Record.Claim.Receipt, args); status != http.StatusOK {
		t.Fatalf("the tool refused the receipt: %d %s", status, body)
	}
	if status, body := useReceipt(t, tool, claimed.Record.Claim.Receipt, args); status != http.StatusConflict || !strings.Contains(body, "receipt_replayed") {
		t.Fatalf("a second use: %d %s", status, body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}

	// The form posted without a signature does not count.
	unsigned := s.pendingPayment(t, "run-passkey-2", 90)
	do(t, ctx, chromedp.Navigate(s.url+"/approvals/"+unsigned), chromedp.WaitVisible(chromedp.ID("step-up")))
	// submit() sends the form as it is, without the page's script.
	eval[bool](t, ctx, `(document.getElementById("approve-form").submit(), true)`)
	refusedWith(t, ctx, contracts.ReasonStepUpRequired)

	// Revoked on the Passkeys page (in another tab), the passkey's
	// signature on the page opened before is refused.
	revoked := s.pendingPayment(t, "run-passkey-3", 75)
	do(t, ctx,
		chromedp.Navigate(s.url+"/approvals/"+revoked),
		chromedp.WaitVisible(chromedp.ID("step-up")),
		until(`!document.getElementById("approve").disabled`),
	)
	other, cancel := chromedp.NewContext(ctx)
	defer cancel()
	stage(t, other, "revoke the passkey",
		chromedp.Navigate(s.url+"/passkeys"),
		chromedp.WaitVisible(chromedp.CSS(`#passkeys .passkey[data-revoked="false"] form.revoke button`)),
		click(chromedp.CSS(`#passkeys .passkey[data-revoked="false"] form.revoke button`)),
		chromedp.WaitVisible(chromedp.CSS(`#passkeys .passkey[data-revoked="true"]`)),
		chromedp.WaitVisible(chromedp.ID("result")),
	)
	stage(t, ctx, "approve with the revoked passkey", click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("result-error")))
	refusedWith(t, ctx, contracts.ReasonPasskeyUnknown)
	do(t, ctx, chromedp.WaitVisible(chromedp.ID("no-passkey")))
	if rec := s.record(t, revoked); rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
		t.Fatalf("record after the refused votes: %+v", rec)
	}
	s.up(t)
}

// receiptTool is payments.send behind the receipt middleware: it runs a
// call only with an unused receipt for exactly its arguments that alice
// (one person, at least) signed with a passkey the server's signed
// approvers document lists. It returns the tool's URL and its run count.
func receiptTool(t *testing.T, s *served) (string, *atomic.Int64) {
	t.Helper()
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: s.url + "/.well-known/jwks.json"})
	if err != nil {
		t.Fatal(err)
	}
	approvers, err := receipt.NewApproversFetcher(receipt.ApproversFetcherConfig{URL: s.url + "/.well-known/countersign-approvers", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	runs := &atomic.Int64{}
	h := receipt.Middleware(receipt.MiddlewareConfig{
		Tool: "payments.send",
		Options: receipt.Options{Keys: keys, Replay: receipt.NewMemoryReplayStore(), Bases: []string{receipt.BasisApproval},
			Humans: &receipt.Humans{Min: 1, Approvers: approvers, People: []string{"alice"}}},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_, _ = io.WriteString(w, `{"sent":true}`)
	}))
	tool := httptest.NewServer(h)
	t.Cleanup(tool.Close)
	return tool.URL, runs
}

// useReceipt calls the tool with args and the receipt.
func useReceipt(t *testing.T, tool, token, args string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tool, strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(receipt.Header, token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

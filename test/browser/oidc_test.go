package browser_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/test/oidcop"
)

// oidcPolicy has alice decide every payment.
const oidcPolicy = `version: "oidc-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.send"]
    action: require_approval
    approvers: [alice]
`

// runServeOIDC starts the binary as built, every role with the embedded
// NATS server, a directory in which alice signs in by her provider
// subject, and the inbox's sign-in through provider p. The returned
// served's token is the billing-bot agent's.
func runServeOIDC(t *testing.T, p *oidcop.Provider) *served {
	t.Helper()
	dir, data := t.TempDir(), t.TempDir()
	agent, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"directory.yaml": fmt.Sprintf(`users:
  - {id: alice, name: Alice Liddell, email: alice@example.com, oidc_subject: sub-alice}
  - id: billing-bot
    tokens: [{sha256: %q, roles: [agent]}]
`, hash),
		"policy.yaml": oidcPolicy,
		"countersign.yaml": fmt.Sprintf(`directory: directory.yaml
policy: policy.yaml
oidc:
  issuer: %q
  client_id: %q
  client_secret: %q
  scopes: [openid, email, offline_access]
  name: Example ID
`, p.Issuer, p.ClientID, p.ClientSecret),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(countersignBinary(t), "serve", "--data", data, "--addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--config", filepath.Join(dir, "countersign.yaml"))
	s := launch(t, cmd, agent)
	return s
}

// A person signs in to the binary's inbox in a real browser through a
// real OpenID provider's login page, sees the request waiting for her,
// approves it (the record names her, via the web), and signs out, which
// goes through the provider's sign-out and back to the sign-in page.
func TestBinaryOIDCSignInApproveAndSignOut(t *testing.T) {
	p := oidcop.Start(t)
	p.Add(oidcop.Person{Subject: "sub-alice", Username: "alice", Password: "alice-pw", Email: "alice@example.com", EmailVerified: true})
	s := runServeOIDC(t, p)
	review := s.review(t, "run-oidc", "pay-1", 1250)
	id, _ := review["event_id"].(string)
	if review["verdict"] != "pending" || id == "" {
		t.Fatalf("review: %+v", review)
	}

	ctx := newBrowser(t, 3*time.Minute)
	at := ""
	do(t, ctx,
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(chromedp.ID("sign-in-oidc")),
		click(chromedp.ID("sign-in-oidc")),
		// The provider's own login page.
		chromedp.WaitVisible(chromedp.ID("username")),
	)
	at = location(t, ctx)
	if !strings.HasPrefix(at, p.Issuer+"/login/") {
		t.Fatalf("the sign-in went to %s, not the provider's login page", at)
	}
	do(t, ctx,
		typeInto(chromedp.ID("username"), "alice"),
		typeInto(chromedp.ID("password"), "alice-pw"),
		click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("rows")),
		liveOpen(),
		until(fmt.Sprintf(`document.querySelector('#rows .row[data-event-id=%q]') !== null`, id)),
		until(`document.querySelector("header .who").textContent === "alice"`),
		chromedp.Navigate(s.url+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.ID("approve")),
		click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.ID("outcome")),
	)
	var ans struct {
		Record contracts.Record `json:"record"`
	}
	if code := s.call(t, http.MethodGet, "/v1/approvals/"+id, "", &ans); code != http.StatusOK {
		t.Fatalf("read the record: %d", code)
	}
	if rec := ans.Record; rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaWeb}) {
		t.Fatalf("record: %+v", rec)
	}

	// The page's live update may replace the header's nodes at any moment:
	// the sign-out button is clicked by a query at the moment of the click.
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS(`form.logout button`)))
	eval[bool](t, ctx, `(document.querySelector("form.logout button").click(), true)`)
	do(t, ctx, chromedp.WaitVisible(chromedp.ID("sign-in-oidc")))
	at = location(t, ctx)
	if at != s.url+"/login" {
		t.Fatalf("after sign-out the browser is at %s, want the sign-in page", at)
	}
	// The session is gone: the inbox asks to sign in again.
	do(t, ctx, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID("sign-in-oidc")))
	at = location(t, ctx)
	if !strings.HasPrefix(at, s.url+"/login") {
		t.Fatalf("after sign-out / opened %s", at)
	}
	s.up(t)
}

// location is the page's URL.
func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	at, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return at
}

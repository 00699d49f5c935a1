package browser_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Two people of different tenants are signed in at once, each with the
// inbox open: each page's live list shows its own tenant's request only,
// and an approver no rule names finds neither, not even by its address.
func TestBrowserTenantsSeeOnlyTheirOwnRequests(t *testing.T) {
	st := startStack(t)
	browser := newBrowser(t, testTimeout)
	alice := person(t, browser)
	gina := person(t, browser)
	do(t, alice, st.signIn("alice-acme"), markPage())
	do(t, gina, st.signIn("gina-globex"), markPage())

	propose := func(tenant, agent string, c call) string {
		t.Helper()
		v, err := st.reviewFor(alice, tenant, agent, "run-"+tenant, c, "")
		if err != nil || v.Verdict != "pending" {
			t.Fatalf("propose for %s: %+v %v", tenant, v, err)
		}
		return v.EventID
	}
	acme := propose("acme", "deploy-bot", call{ID: "c1", Name: "deploy.release", Arguments: json.RawMessage(`{"service":"checkout","version":"v2","env":"production"}`)})
	globex := propose("globex", "db-migrator", call{ID: "c1", Name: "db.migrate", Arguments: json.RawMessage(`{"database":"orders","migration":"0042"}`)})

	rows := `Array.from(document.querySelectorAll("#rows .row")).map(r => r.dataset.eventId).join(",")`
	// Each list updates live (the page is the one signed in: no reload) to
	// its own tenant's request; the other's event, on the same ordered
	// feed, never reaches it.
	do(t, gina, until(`document.querySelectorAll("#rows .row").length === 1`), until(stillSamePage))
	do(t, alice, until(`document.querySelectorAll("#rows .row").length === 1`), until(stillSamePage))
	if got := eval[string](t, gina, rows); got != globex {
		t.Fatalf("gina of globex lists %q, want only %s", got, globex)
	}
	if got := eval[string](t, alice, rows); got != acme {
		t.Fatalf("alice of acme lists %q, want only %s", got, acme)
	}
	// Reloaded, the lists are the same.
	for who, p := range map[string]context.Context{acme: alice, globex: gina} {
		do(t, p, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("rows")))
		if got := eval[string](t, p, rows); got != who {
			t.Fatalf("after a reload: %q, want %s", got, who)
		}
	}

	carol := person(t, browser)
	do(t, carol, st.signIn("carol"))
	if got := eval[string](t, carol, rows); got != "" {
		t.Fatalf("carol, whom no rule names, lists %q", got)
	}
	for _, id := range []string{acme, globex} {
		do(t, carol, chromedp.Navigate(st.url+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("main")))
		body := eval[string](t, carol, `document.body.innerText`)
		if !strings.Contains(body, "There is no approval "+id) || strings.Contains(body, "checkout") || strings.Contains(body, "orders") {
			t.Fatalf("carol opens %s:\n%s", id, body)
		}
	}
}

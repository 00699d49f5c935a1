package browser_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserBatchApproval approves a selection from the list, then every
// remaining request of a run from the run's page; each run resumes.
func TestBrowserBatchApproval(t *testing.T) {
	st := startStack(t)
	ctx := newBrowser(t, testTimeout)
	do(t, ctx, st.signIn("alice"))
	runCalls := []call{refund("b1", 10, "Acme"), refund("b2", 20, "Acme"), refund("b3", 30, "Acme")}
	ids := map[string]string{}
	for _, c := range runCalls {
		ids[c.ID] = st.pending(t, ctx, "billing-bot", "run-batch", c)
	}
	other := refund("x1", 40, "Initech")
	ids[other.ID] = st.pending(t, ctx, "billing-bot", "run-other", other)

	// A selection across runs: one call of run-batch and the other run's.
	pick := func(id string) string { return fmt.Sprintf(`document.querySelector('.pick[value="%s"]')`, id) }
	do(t, ctx,
		chromedp.Navigate(st.url+"/"),
		until(`document.querySelectorAll("#rows .pick").length === 4`),
		click(chromedp.CSS(fmt.Sprintf(`.pick[value="%s"]`, ids["b1"]))),
		click(chromedp.CSS(fmt.Sprintf(`.pick[value="%s"]`, ids["x1"]))),
		until(pick(ids["b1"])+`.checked && `+pick(ids["x1"])+`.checked`),
		chromedp.SetValue(chromedp.ID("batch-comment"), "checked both"),
		click(chromedp.ID("approve-selected")),
		chromedp.WaitVisible(chromedp.ID("batch-results")),
	)
	if got := eval[string](t, ctx, `document.getElementById("batch-summary").textContent`); got != "2 counted." {
		t.Fatalf("batch summary %q", got)
	}
	for _, c := range []call{runCalls[0], other} {
		if r := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#batch-results li[data-event-id="%s"]').dataset.result`, ids[c.ID])); r != "counted" {
			t.Fatalf("%s: %s", c.ID, r)
		}
		runID := "run-batch"
		if c.ID == "x1" {
			runID = "run-other"
		}
		if v := verdictOf(t, ctx, st.waitFor(ctx, "billing-bot", runID, c)); v.Verdict != "allowed" {
			t.Fatalf("%s resumed with %+v", c.ID, v)
		}
	}

	// The run's page offers the two calls left.
	do(t, ctx,
		chromedp.Navigate(st.url+"/approvals/"+ids["b2"]),
		chromedp.WaitVisible(chromedp.ID("run-link")),
		click(chromedp.ID("run-link")),
		chromedp.WaitVisible(chromedp.ID("approve-run")),
	)
	if got := eval[string](t, ctx, `document.getElementById("approve-run").textContent`); got != "Approve all 2 of this run" {
		t.Fatalf("run button %q", got)
	}
	do(t, ctx, click(chromedp.ID("approve-run")), chromedp.WaitVisible(chromedp.ID("batch-results")))
	if got := eval[string](t, ctx, `document.getElementById("batch-summary").textContent`); got != "2 counted." {
		t.Fatalf("run batch summary %q", got)
	}
	for _, c := range runCalls[1:] {
		if v := verdictOf(t, ctx, st.waitFor(ctx, "billing-bot", "run-batch", c)); v.Verdict != "allowed" {
			t.Fatalf("%s resumed with %+v", c.ID, v)
		}
	}
	// Nothing is left to approve in the run.
	do(t, ctx, chromedp.Navigate(st.url+"/runs/run-batch?agent=billing-bot"), chromedp.WaitVisible(chromedp.ID("rows")))
	if n := eval[int](t, ctx, `document.querySelectorAll("#approve-run, #rows .pick").length`); n != 0 {
		t.Fatalf("%d batch controls left on a decided run", n)
	}
}

// TestBrowserGrantCreateAndRevoke approves a call with a run grant from
// its page, sees the next identical call of the run allowed without a
// request, revokes the grant on the grants page, and sees the call after
// that wait for a human again.
func TestBrowserGrantCreateAndRevoke(t *testing.T) {
	st := startStack(t)
	ctx := newBrowser(t, testTimeout)
	do(t, ctx, st.signIn("alice"))
	id := st.pending(t, ctx, "billing-bot", "run-grant", refund("g1", 120, "Globex GmbH"))

	do(t, ctx,
		chromedp.Navigate(st.url+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.ID("grant-scope")),
	)
	if got := eval[string](t, ctx, `Array.from(document.querySelectorAll("#grant-scope option")).map(o => o.value).join(",")`); got != ",run,agent" {
		t.Fatalf("grant scopes offered: %q", got)
	}
	do(t, ctx,
		chromedp.SetValue(chromedp.ID("grant-scope"), "run"),
		chromedp.SetValue(chromedp.ID("grant-ttl"), "1h"),
		click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.ID("outcome")),
		// The grants page lists what every gate of this process sees.
		until(fmt.Sprintf(`(fetch("/grants").then(r => r.text()).then(t => { window.__grants = t; }), (window.__grants || "").includes('data-grant-id="%s"'))`, id)),
	)
	v, err := st.review(ctx, "billing-bot", "run-grant", refund("g2", 120, "Globex GmbH"), "")
	if err != nil || v.Verdict != "allowed" {
		t.Fatalf("the next identical call of the run: %+v %v", v, err)
	}

	do(t, ctx,
		chromedp.Navigate(st.url+"/grants"),
		chromedp.WaitVisible(chromedp.ID("revoke-"+id)),
	)
	if got := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-grant-id="%s"] .summary').textContent`, id)); got != "billing.refund for agent billing-bot, run run-grant" {
		t.Fatalf("grant row %q", got)
	}
	do(t, ctx,
		click(chromedp.ID("revoke-"+id)),
		chromedp.WaitVisible(chromedp.ID("result")),
	)
	if st := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-grant-id="%s"]').dataset.status`, id)); st != "revoked" {
		t.Fatalf("grant status after revoking: %q", st)
	}
	v, err = st.review(ctx, "billing-bot", "run-grant", refund("g3", 120, "Globex GmbH"), "")
	if err != nil || v.Verdict != "pending" {
		t.Fatalf("a call after the revocation: %+v %v", v, err)
	}
}

package browser_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// testTimeout bounds each browser test.
const testTimeout = 2 * time.Minute

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// markPage tags the loaded page, so a test can tell a live update from a reload.
func markPage() chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[bool](`(window.__countersignTestMark = true)`)(ctx, t)
		return chromedp.Void{}, err
	}
}

const stillSamePage = `window.__countersignTestMark === true`

func verdictOf(t *testing.T, ctx context.Context, ch <-chan verdict) verdict {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("the waiting run ended without a verdict")
		}
		return v
	case <-ctx.Done():
		t.Fatal("the waiting run did not resume")
	}
	return verdict{}
}

func TestBrowserRequestAppearsLiveAndApprovalResumesRun(t *testing.T) {
	st := startStack(t)
	ctx := newBrowser(t, testTimeout)
	do(t, ctx, st.signIn("alice"), markPage(),
		until(`document.querySelectorAll("#rows .row").length === 0`))

	// The agent submits and waits; the request shows up without a reload.
	c := refund("c1", 120, "Globex GmbH")
	run := st.waitFor(ctx, "billing-bot", "run-approve", c)
	do(t, ctx, until(`document.querySelectorAll("#rows .row").length === 1`), until(stillSamePage))
	id := eval[string](t, ctx, `document.querySelector("#rows .row").dataset.eventId`)
	summary := eval[string](t, ctx, `document.querySelector("#rows .row .summary").textContent`)
	if summary != "Refund 120 EUR to Globex GmbH" {
		t.Fatalf("row summary %q", summary)
	}

	// j selects the row, Enter opens it, a approves.
	do(t, ctx,
		chromedp.KeyEvent("j"),
		until(`document.querySelector("#rows .row.selected") !== null`),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.ID("approve")),
		liveOpen(),
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(chromedp.ID("outcome")),
	)
	outcome := eval[string](t, ctx, `document.getElementById("outcome").textContent`)
	if !strings.HasPrefix(outcome, "Approved by alice via web") {
		t.Fatalf("outcome %q", outcome)
	}
	v := verdictOf(t, ctx, run)
	if v.Verdict != "allowed" || v.EventID != id {
		t.Fatalf("the run resumed with %+v, want allowed for %s", v, id)
	}
}

func TestBrowserRejectWithReasonDeniesRun(t *testing.T) {
	st := startStack(t)
	ctx := newBrowser(t, testTimeout)
	do(t, ctx, st.signIn("alice"))
	c := refund("c1", 900, "Initech")
	id := st.pending(t, ctx, "billing-bot", "run-reject", c)
	run := st.waitFor(ctx, "billing-bot", "run-reject", c)

	const reason = "Refunds over 500 EUR need the invoice number."
	do(t, ctx,
		chromedp.Navigate(st.url+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.ID("reject")),
		chromedp.KeyEvent("r"),
		until(`document.activeElement && document.activeElement.id === "reject-reason"`),
		// Typed keys reach the focused field (the test's key events carry
		// the character separately, so the shortcut's own key is cleared).
		chromedp.SetValue(chromedp.ID("reject-reason"), reason),
		click(chromedp.ID("reject")),
		chromedp.WaitVisible(chromedp.ID("outcome")),
	)
	if got := eval[string](t, ctx, `document.getElementById("outcome").textContent`); got != "Rejected by alice via web: "+reason {
		t.Fatalf("outcome %q", got)
	}
	v := verdictOf(t, ctx, run)
	if v.Verdict != "denied" || v.EventID != id || !strings.Contains(v.Reason, reason) {
		t.Fatalf("the run resumed with %+v, want denied with the reason", v)
	}
}

func TestBrowserEditFailingSchemaShowsErrorNextToField(t *testing.T) {
	st := startStack(t)
	ctx := newBrowser(t, testTimeout)
	do(t, ctx, st.signIn("alice"))
	id := st.pending(t, ctx, "billing-bot", "run-edit", refund("c1", 300, "Umbrella Corp"))

	do(t, ctx,
		chromedp.Navigate(st.url+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.ID("arguments")),
		chromedp.KeyEvent("e"),
		until(`document.activeElement && document.activeElement.id === "arguments"`),
		chromedp.SetValue(chromedp.ID("arguments"), `{"amount": 5000, "customer": "Umbrella Corp"}`),
		click(chromedp.ID("edit")),
		chromedp.WaitVisible(chromedp.ID("arguments-error")),
	)
	msg := eval[string](t, ctx, `document.getElementById("arguments-error").textContent`)
	if !strings.HasPrefix(msg, "arguments/amount: ") {
		t.Fatalf("error next to the editor: %q", msg)
	}
	// The message belongs to the field, which keeps the edit, and nothing was decided.
	ok := eval[bool](t, ctx, `(function () {
		var f = document.getElementById("arguments"), e = document.getElementById("arguments-error");
		return f.getAttribute("aria-describedby") === "arguments-error" && f.getAttribute("aria-invalid") === "true" &&
			e.previousElementSibling === f && f.value.indexOf("5000") >= 0 &&
			document.getElementById("outcome") === null && document.getElementById("approve-form") !== null;
	})()`)
	if !ok {
		t.Fatal("the schema error is not shown next to the editor, or the request changed")
	}
}

func TestBrowserSecondApproverSeesDecisionLive(t *testing.T) {
	st := startStack(t)
	browser := newBrowser(t, testTimeout)
	alice := person(t, browser)
	bob := person(t, browser)
	do(t, alice, st.signIn("alice"))
	do(t, bob, st.signIn("bob"))
	id := st.pending(t, alice, "deploy-bot", "run-live",
		call{ID: "c1", Name: "deploy.release", Arguments: json.RawMessage(`{"service":"checkout","version":"v2.14.0","env":"production"}`)})

	for _, p := range []context.Context{alice, bob} {
		do(t, p, chromedp.Navigate(st.url+"/approvals/"+id), chromedp.WaitVisible(chromedp.ID("approve")), liveOpen())
	}
	do(t, bob, markPage())
	do(t, alice, click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("outcome")))

	// Bob's buttons give way to the outcome, without a reload.
	do(t, bob,
		until(`document.getElementById("outcome") !== null && document.getElementById("approve-form") === null && document.getElementById("reject-form") === null`),
		until(stillSamePage),
	)
	if got := eval[string](t, bob, `document.getElementById("outcome").textContent`); !strings.HasPrefix(got, "Approved by alice via web") {
		t.Fatalf("bob sees %q", got)
	}
	// Both pages' titles and headings now say how it ended; alice's
	// confirmation does not repeat the outcome.
	for name, p := range map[string]context.Context{"alice": alice, "bob": bob} {
		if got := eval[string](t, p, `document.title + " | " + document.getElementById("heading").textContent`); got != "Approved: deploy.release · Countersign | Approved: deploy.release" {
			t.Errorf("%s's title and heading: %q", name, got)
		}
	}
	if got := eval[string](t, alice, `document.getElementById("result").textContent`); got != "Your approval was counted." {
		t.Errorf("alice's confirmation: %q", got)
	}
}

// fleet is what the simulated agents propose for the looks of the inbox
// (TestBrowserLooks) and its screenshots.
var fleet = []struct {
	agent, run string
	c          call
}{
	{"billing-bot", "run-7f3a", refund("c1", 480, "Globex GmbH")},
	{"deploy-bot", "run-19c2", call{ID: "c1", Name: "deploy.release", Arguments: json.RawMessage(`{"service":"checkout","version":"v2.14.0","env":"production","strategy":"canary 10%"}`)}},
	{"support-mailer", "run-5e81", call{ID: "c1", Name: "email.send", Arguments: json.RawMessage(`{"to":"jane.doe@example.com","subject":"Your refund is on its way","body":"Hello Jane,\n\nWe have refunded the duplicate charge of 48 EUR on your March invoice. It should appear on your statement within 5 business days.\n\nBest regards,\nSupport"}`)}},
	{"db-migrator", "run-a004", call{ID: "c1", Name: "db.migrate", Arguments: json.RawMessage(`{"database":"orders","migration":"0042_add_refund_reason","dry_run":false}`)}},
	{"billing-bot", "run-7f40", refund("c1", 95, "Initech")},
}

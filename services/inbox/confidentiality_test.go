package inbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// submitAs reviews one call as the named agent token for tenant and
// returns its pending event id.
func (e *env) submitAs(t *testing.T, token, tenant, tool string, args string) string {
	t.Helper()
	body := map[string]any{
		"run":        map[string]any{"id": "run-" + tenant + "-" + tool, "agent": "billing-bot", "tenant": tenant},
		"tool_calls": []map[string]any{{"id": "c1", "name": tool, "arguments": json.RawMessage(args)}},
	}
	var ans struct {
		Results []result `json:"results"`
	}
	r := e.call(t, "POST", "/v1/reviews", token, body)
	r.decode(t, &ans)
	if r.status != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" {
		t.Fatalf("review as %s: %d %s", token, r.status, r.body)
	}
	return ans.Results[0].EventID
}

// An approver the request does not name, and one of another tenant, find
// no trace of it in the inbox: not in the list, not in history, and its
// page answers as for a request that does not exist.
func TestInboxShowsOnlyReadableRequests(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.submitAs(t, "agent-acme", "acme", "billing.refund", `{"amount":5,"customer":"Initech"}`)
	for _, who := range []string{"carol", "gina-globex"} {
		w := e.signIn(t, who)
		if r := w.get("/approvals/" + id); r.status != http.StatusNotFound || strings.Contains(string(r.body), "Initech") {
			t.Fatalf("%s opens the request: %d", who, r.status)
		}
		if r := w.get("/"); strings.Contains(string(r.body), id) {
			t.Fatalf("%s's inbox lists the request", who)
		}
		if r := w.get("/history?q=" + id[:8]); strings.Contains(string(r.body), id) {
			t.Fatalf("%s's history lists the request", who)
		}
	}
	alice := e.signIn(t, "alice-acme")
	if r := alice.get("/approvals/" + id); r.status != http.StatusOK || !strings.Contains(string(r.body), "Initech") {
		t.Fatalf("alice of acme cannot open the request she decides: %d", r.status)
	}
}

// events opens the inbox's live feed for w and returns the event ids of
// the requested events, in order, as they arrive.
func (w *webClient) events(t *testing.T, ctx context.Context) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", w.base+"/inbox/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("inbox events: %d", resp.StatusCode)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	out := make(chan string, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				EventID string `json:"event_id"`
				Kind    string `json:"kind"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Kind == "requested" {
				out <- ev.EventID
			}
		}
	}()
	return out
}

// Two people of different tenants signed in at once: each page's live
// feed tells of its own tenant's requests only. The feed is ordered, so
// each one's first event being its own tenant's request shows the other's,
// sent before, was left out.
func TestInboxLiveFeedStaysWithinTheTenant(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := e.signIn(t, "alice-acme").events(t, ctx)
	gina := e.signIn(t, "gina-globex").events(t, ctx)
	acme := e.submitAs(t, "agent-acme", "acme", "billing.refund", `{"amount":5,"customer":"Initech"}`)
	globex := e.submitAs(t, "agent", "globex", "reports.weekly", `{"week":3}`)
	first := func(who string, ch <-chan string) string {
		select {
		case id := <-ch:
			return id
		case <-ctx.Done():
			t.Fatalf("%s's feed told of nothing", who)
			return ""
		}
	}
	if got := first("gina", gina); got != globex {
		t.Fatalf("gina of globex was told of %s first, want %s (globex's)", got, globex)
	}
	if got := first("alice", alice); got != acme {
		t.Fatalf("alice of acme was told of %s first, want %s (acme's)", got, acme)
	}
}

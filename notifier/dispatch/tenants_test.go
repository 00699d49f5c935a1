package dispatch_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/notifier/webhook"
)

// publishDirectory publishes the live directory, as the API role does.
func (e *env) publishDirectory(people ...contracts.DirectoryPerson) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		e.t.Fatal(err)
	}
	raw, err := json.Marshal(contracts.Directory{Spec: contracts.SpecDirectory, Version: fmt.Sprint(len(people)),
		People: people, UpdatedAt: time.Now().UTC()})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := kv.Put(ctx, contracts.DirectoryKey, raw); err != nil {
		e.t.Fatal(err)
	}
}

// The attacker's case of the tenant rule: one policy serves two tenants,
// and its rule names approvers of both. A request of tenant acme reaches
// acme's approver on Slack and by email, never globex's; the failed
// receipt says why without naming globex; acme's admin, whom the rule
// routes to by name, is told too; the outcome updates those it told
// alone; and of the webhook endpoints only acme's (and the one
// scoped to every tenant) get the request.
func TestRequestReachesOnlyApproversOfItsTenant(t *testing.T) {
	e := newEnv(t)
	e.publishDirectory(
		contracts.DirectoryPerson{ID: "alice", Email: "alice@example.com", Tenants: []string{"acme"}, Roles: []string{"approver"}},
		contracts.DirectoryPerson{ID: "bob", Email: "bob@example.com", Tenants: []string{"globex"}, Roles: []string{"approver"}},
		contracts.DirectoryPerson{ID: "carol", Email: "carol@example.com", Tenants: []string{"acme"}, Roles: []string{"admin"}},
	)
	sink := newPathSink(t)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	hook, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{
		{Name: "acme-audit", URL: sink.srv.URL + "/acme", Secrets: []string{secret}, Tenants: []string{"acme"}},
		{Name: "globex-audit", URL: sink.srv.URL + "/globex", Secrets: []string{secret}, Tenants: []string{"globex"}},
		{Name: "everything", URL: sink.srv.URL + "/all", Secrets: []string{secret}, Tenants: []string{"*"}},
		{Name: "unscoped", URL: sink.srv.URL + "/unscoped", Secrets: []string{secret}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	slack, email := newChannel("slack", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack, email, hook},
		Endpoints: []string{"acme-audit", "globex-audit", "everything", "unscoped"}})

	req := request("slack", "email", "email:carol", "webhook")
	req.Run.Tenant = "acme"
	e.publish(req)
	got := e.receiptsFor(req.EventID, 7)
	for _, k := range []string{
		"slack U0ALICE001 requested", "email alice@example.com requested", "email carol@example.com requested",
		"webhook acme-audit requested", "webhook everything requested",
	} {
		if r, ok := got[k]; !ok || r.Status != notifier.ReceiptDelivered {
			t.Errorf("%s: receipt %+v, want delivered (receipts %v)", k, r, got)
		}
	}
	for _, route := range []string{"slack", "email"} {
		r := got[route+" "+route+" requested"]
		if r.Status != notifier.ReceiptFailed || !strings.Contains(r.Error, "bob may not read requests of this tenant") {
			t.Errorf("route %s: receipt %+v, want failed saying bob may not read it", route, r)
		}
		if strings.Contains(r.Error, "globex") {
			t.Errorf("route %s: the receipt names bob's tenant: %q", route, r.Error)
		}
	}
	if n := slack.count("U0BOB00001", false) + email.count("bob@example.com", false); n != 0 {
		t.Fatalf("globex's approver was told of an acme request %d times", n)
	}
	for _, path := range []string{"/globex", "/unscoped"} {
		if sink.count(path) != 0 {
			t.Errorf("webhook endpoint %s got an acme request", path)
		}
	}

	// The outcome updates acme's approvers and endpoints, nobody else.
	e.vote(req.EventID, "alice", contracts.DecisionApprove)
	e.waitDecided(req.EventID)
	for i := 0; i < 5; i++ {
		r := e.receipt("outcome receipts", func(r notifier.Receipt) bool {
			return r.EventID == req.EventID && r.Kind == notifier.KindDecided
		})
		if r.Approver == "bob" || r.Target == "globex-audit" || r.Target == "unscoped" {
			t.Errorf("outcome sent to %s %s", r.Channel, r.Target)
		}
	}
	if n := slack.count("U0BOB00001", true) + email.count("bob@example.com", true); n != 0 {
		t.Errorf("globex's approver got the acme outcome %d times", n)
	}
}

// A person the live directory limits to tenants is not told of a request
// without one, and someone it does not list is told nothing, whatever the
// address book says.
func TestLiveDirectoryDecidesWhoIsTold(t *testing.T) {
	e := newEnv(t)
	e.publishDirectory(
		contracts.DirectoryPerson{ID: "alice", Email: "alice@example.com", Tenants: []string{"acme"}},
		contracts.DirectoryPerson{ID: "carol", Email: "carol@example.com"},
	)
	email := newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{email}})
	req := request("email")
	req.Quorum.Approvers = []string{"alice", "bob", "carol"}
	e.publish(req)
	got := e.receiptsFor(req.EventID, 2)
	if r := got["email carol@example.com requested"]; r.Status != notifier.ReceiptDelivered {
		t.Errorf("carol: %+v, want delivered (receipts %v)", r, got)
	}
	r := got["email email requested"]
	for _, want := range []string{"alice is limited to tenants and this request names none", "bob is not in the live directory"} {
		if !strings.Contains(r.Error, want) {
			t.Errorf("problem receipt %q lacks %q", r.Error, want)
		}
	}
	if email.count("alice@example.com", false)+email.count("bob@example.com", false) != 0 {
		t.Error("someone the live directory keeps out was emailed")
	}
}

// fakeNow is a clock a test moves by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeNow) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The attacker's case of the fan-out cap: one agent opens more requests
// than the cap within a minute. Each approver gets at most the cap on
// each channel, then one message saying more wait in the inbox; the rest
// are held with a receipt that says so and counted; the next window
// delivers again. The clock is the dispatcher's, moved by hand.
func TestFloodIsCappedPerApproverAndChannel(t *testing.T) {
	const capN, extra = 5, 4
	e := newEnv(t)
	clock := &fakeNow{t: time.Now().UTC()}
	slack, email := newChannel("slack", nil), newChannel("email", nil)
	e.start(dispatch.Config{Channels: []notifier.Channel{slack, email}, Now: clock.Now,
		Fanout: dispatch.FanoutPolicy{Max: capN, Window: time.Minute}})
	var ids []string
	for range capN + extra {
		req := request("slack", "email")
		ids = append(ids, req.EventID)
		e.publish(req)
	}
	// Per target: capN delivered, extra held (failed receipts), one
	// KindHeld message.
	targets := []string{"U0ALICE001", "U0BOB00001", "alice@example.com", "bob@example.com"}
	want := len(targets) * (capN + extra + 1)
	type tally struct{ delivered, held, summaries int }
	per := map[string]*tally{}
	for _, a := range targets {
		per[a] = &tally{}
	}
	for i := 0; i < want; i++ {
		r := e.receipt(fmt.Sprintf("receipt %d of %d", i+1, want), func(notifier.Receipt) bool { return true })
		tl := per[r.Target]
		switch {
		case r.Kind == notifier.KindHeld && r.Status == notifier.ReceiptDelivered:
			tl.summaries++
		case r.Kind == notifier.KindRequested && r.Status == notifier.ReceiptDelivered:
			tl.delivered++
		case r.Kind == notifier.KindRequested && strings.Contains(r.Error, "held by the fan-out cap"):
			tl.held++
		default:
			t.Errorf("unexpected receipt %+v", r)
		}
	}
	for a, tl := range per {
		if tl.delivered != capN || tl.held != extra || tl.summaries != 1 {
			t.Errorf("%s: %d delivered, %d held, %d summaries; want %d, %d, 1", a, tl.delivered, tl.held, tl.summaries, capN, extra)
		}
	}
	for _, ch := range []*channel{slack, email} {
		ch.mu.Lock()
		for _, c := range ch.log {
			if c.N.Kind == notifier.KindHeld && (c.N.HeldUntil.IsZero() || !strings.Contains(notifier.HeldLine(c.N.HeldUntil), "inbox")) {
				t.Errorf("held message without its window's end: %+v", c.N)
			}
		}
		n := len(ch.log)
		ch.mu.Unlock()
		if n != 2*(capN+1) {
			t.Errorf("%s: %d messages for %d requests to 2 approvers, want %d", ch.name, n, capN+extra, 2*(capN+1))
		}
	}
	// The next window: requests are sent again.
	clock.Advance(time.Minute)
	req := request("slack")
	e.publish(req)
	got := e.receiptsFor(req.EventID, 2)
	for _, k := range []string{"slack U0ALICE001 requested", "slack U0BOB00001 requested"} {
		if got[k].Status != notifier.ReceiptDelivered {
			t.Errorf("after the window %s: %+v", k, got[k])
		}
	}
	// A held request that is decided gets no outcome where it was held.
	for _, id := range ids {
		e.vote(id, "alice", contracts.DecisionApprove)
	}
	for range 4 * capN {
		e.receipt("outcome of a shown request", func(r notifier.Receipt) bool { return r.Kind == notifier.KindDecided })
	}
	for _, id := range ids {
		e.waitDecided(id)
	}
	slack.mu.Lock()
	defer slack.mu.Unlock()
	shown := map[string]bool{}
	for _, c := range slack.log {
		if !c.Update && c.N.Kind == notifier.KindRequested {
			shown[c.N.EventID()+" "+c.N.Target.Address] = true
		}
	}
	for _, c := range slack.log {
		if c.Update && !shown[c.N.EventID()+" "+c.N.Target.Address] {
			t.Errorf("outcome of %s sent to %s, which was never shown it", c.N.EventID(), c.N.Target.Address)
		}
	}
}

// pathSink is a webhook receiver that counts the posts to each path.
type pathSink struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths map[string]int
}

func newPathSink(t *testing.T) *pathSink {
	h := &pathSink{paths: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths[r.URL.Path]++
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// count returns how many bodies were posted to path.
func (h *pathSink) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paths[path]
}

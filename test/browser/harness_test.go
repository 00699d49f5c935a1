package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
	"github.com/countersign/countersign/services/inbox"
)

// fleetPolicy gates the simulated fleet's calls; refunds may be decided by
// alice or bob, and edited within the tool's schema.
const fleetPolicy = `version: "browser-1"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    risk: high
    approvers: [alice, bob]
    allowed_decisions: [approve, reject, edit]
    summary: "Refund {{args.amount}} EUR to {{args.customer}}"
    grants: {scopes: [call, run, agent], max_ttl: 8h, arguments: condition}
  - name: deploys
    tools: ["deploy.*"]
    action: require_approval
    risk: critical
    approvers: [alice, bob]
    summary: "Deploy {{args.service}} {{args.version}} to {{args.env}}"
  - name: outbound-email
    tools: ["email.send"]
    action: require_approval
    risk: medium
    approvers: [alice, bob]
    allowed_decisions: [approve, reject, respond]
    summary: "Send an email to {{args.to}}: {{args.subject}}"
  - name: migrations
    tools: ["db.migrate"]
    action: require_approval
    risk: low
    approvers: [alice, gina]
    summary: "Run migration {{args.migration}} on {{args.database}}"
`

const refundSchema = `{"type":"object","properties":{"amount":{"type":"number","exclusiveMinimum":0,"maximum":1000},"customer":{"type":"string"},"reason":{"type":"string"}},"required":["amount","customer"],"additionalProperties":false}`

// stack is Countersign running in the test: an embedded NATS server, the
// arbiter, the gate and the HTTP server with the inbox.
type stack struct {
	url    string
	tokens map[string]string
	// push is what the server's Web Push channel needs: the VAPID key the
	// API hands browsers, the one-tap actions' keys, and the notifier's
	// view of the bus.
	push stackPush
}

type stackPush struct {
	vapid   *push.VAPID
	actions *push.Actions
	js      jetstream.JetStream
}

func startStack(t *testing.T) *stack {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter)})
	policies := countersigntest.LivePolicy(t, srv.JetStreamAs(embedded.RoleAPI), fleetPolicy)
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleAPI), policies)
	st := &stack{tokens: map[string]string{}}
	var tokens []api.Token
	// alice-acme and gina-globex are limited to their tenants; carol is an
	// approver no rule names.
	for _, u := range []struct {
		name, subject, role string
		tenants             []string
	}{
		{"agent", "agent:fleet", api.RoleAgent, nil}, {"alice", "alice", api.RoleApprover, nil}, {"bob", "bob", api.RoleApprover, nil},
		{"alice-acme", "alice", api.RoleApprover, []string{"acme"}}, {"gina-globex", "gina", api.RoleApprover, []string{"globex"}},
		{"carol", "carol", api.RoleApprover, nil},
	} {
		tok, hash, err := api.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		st.tokens[u.name] = tok
		tokens = append(tokens, api.Token{Name: u.name, Subject: u.subject, SHA256: hash, Roles: []string{u.role}, Tenants: u.tenants})
	}
	st.push = newStackPush(t, srv.JetStreamAs(embedded.RoleNotifier))
	reg := prometheus.NewRegistry()
	s, err := api.New(ctx, api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Policies: policies, Tokens: tokens, Registerer: reg,
		Push: api.PushConfig{PublicKey: st.push.vapid.PublicKey(), Actions: st.push.actions, AllowInsecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, inbox.Config{API: s, JS: srv.JetStreamAs(embedded.RoleAPI), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	// The server closes first so that open event streams end.
	t.Cleanup(func() { _ = s.Close(); hs.CloseClientConnections(); hs.Close() })
	st.url = hs.URL
	return st
}

// newStackPush makes a VAPID key and one-tap action keys for the stack.
func newStackPush(t *testing.T, js jetstream.JetStream) stackPush {
	t.Helper()
	priv, err := push.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	vapid, err := push.NewVAPID(priv, "mailto:ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	actions, err := push.NewActions([]push.Key{{ID: "k1", Secret: bytes.Repeat([]byte("push-action-key!"), 2)}})
	if err != nil {
		t.Fatal(err)
	}
	return stackPush{vapid: vapid, actions: actions, js: js}
}

// call is one tool call an agent proposes.
type call struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	ToolSchema json.RawMessage `json:"tool_schema,omitempty"`
}

type verdict struct {
	Verdict   string          `json:"verdict"`
	EventID   string          `json:"event_id"`
	Reason    string          `json:"reason"`
	Arguments json.RawMessage `json:"arguments"`
}

// review posts one call of run as the agent; with wait, it blocks until
// the call is decided (or the wait ends).
func (st *stack) review(ctx context.Context, agent, runID string, c call, wait string) (verdict, error) {
	return st.reviewFor(ctx, "", agent, runID, c, wait)
}

// reviewFor is review for a tenant's run.
func (st *stack) reviewFor(ctx context.Context, tenant, agent, runID string, c call, wait string) (verdict, error) {
	body, _ := json.Marshal(map[string]any{
		"run":        map[string]any{"id": runID, "agent": agent, "requested_by": "agent:" + agent, "tenant": tenant},
		"tool_calls": []call{c},
	})
	path := "/v1/reviews"
	if wait != "" {
		path += "?wait=" + wait
	}
	req, err := http.NewRequestWithContext(ctx, "POST", st.url+path, bytes.NewReader(body))
	if err != nil {
		return verdict{}, err
	}
	req.Header.Set("Authorization", "Bearer "+st.tokens["agent"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return verdict{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var ans struct {
		Results []verdict `json:"results"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &ans) != nil || len(ans.Results) != 1 {
		return verdict{}, fmt.Errorf("review: %d %s", resp.StatusCode, data)
	}
	return ans.Results[0], nil
}

// pending proposes c and expects it to wait for a human.
func (st *stack) pending(t *testing.T, ctx context.Context, agent, runID string, c call) string {
	t.Helper()
	v, err := st.review(ctx, agent, runID, c, "")
	if err != nil || v.Verdict != "pending" {
		t.Fatalf("propose %s: %+v %v", c.Name, v, err)
	}
	return v.EventID
}

// waitFor re-attaches to a proposed call and returns its verdict once decided.
func (st *stack) waitFor(ctx context.Context, agent, runID string, c call) <-chan verdict {
	out := make(chan verdict, 1)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			v, err := st.review(ctx, agent, runID, c, "30s")
			if err != nil {
				return
			}
			if v.Verdict != "pending" {
				out <- v
				return
			}
		}
	}()
	return out
}

func refund(id string, amount int, customer string) call {
	return call{ID: id, Name: "billing.refund", ToolSchema: json.RawMessage(refundSchema),
		Arguments: json.RawMessage(fmt.Sprintf(`{"amount":%d,"customer":%q,"reason":"duplicate charge"}`, amount, customer))}
}

// chromium is the browser binary: $COUNTERSIGN_CHROMIUM, else Debian's.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("COUNTERSIGN_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no Chromium at %s (%v): run `make browser` to install Debian's chromium, or set COUNTERSIGN_CHROMIUM", path, err)
	}
	return path
}

// newBrowser starts a headless Chromium for the test, bounded by timeout,
// and returns its first tab's context.
func newBrowser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		// Without these Chromium tries to reach Google's services and
		// hangs on a closed network.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("mute-audio", true),
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return tab
}

// person opens a browser context of its own (its own cookies) in the
// browser of parent.
func person(t *testing.T, parent context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("new browser context: %v", err)
	}
	return ctx
}

// signIn signs in with the named token and waits for the inbox and its
// event stream.
func (st *stack) signIn(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(st.url+"/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		typeInto(chromedp.ID("token"), st.tokens[name]),
		click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("rows")),
		liveOpen(),
	)
}

// liveOpen waits until the page's event stream is connected.
func liveOpen() chromedp.Action[chromedp.Void] {
	return until(`document.documentElement.getAttribute("data-live") === "open"`)
}

// until waits for a JavaScript condition on the page, checked every 50 ms
// (animation frames do not run in a background tab).
func until(expr string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := p(ctx, t); err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", expr, err)
		}
		return chromedp.Void{}, nil
	}
}

// click clicks the element sel names, and typeInto types keys into it.
// The browser can forget a node's id between the query that found it and
// the step before the input (the DOM agent hands out a fresh document);
// nothing was clicked or typed then, so the action is tried again on the
// element found anew.
func click[S chromedp.Selectable](sel S) chromedp.Action[chromedp.Void] {
	return again(func() chromedp.Action[chromedp.Void] { return chromedp.Click(sel) })
}

func typeInto[S chromedp.Selectable](sel S, keys string) chromedp.Action[chromedp.Void] {
	return again(func() chromedp.Action[chromedp.Void] { return chromedp.SendKeys(sel, keys) })
}

func again(action func() chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for tries := 1; ; tries++ {
			_, err := action()(ctx, t)
			var stale *cdproto.Error
			if err == nil || tries == 5 || !errors.As(err, &stale) || stale.Message != "Could not find node with given id" {
				return chromedp.Void{}, err
			}
		}
	}
}

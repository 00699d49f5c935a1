package webhook_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/notifier/webhook"
)

var (
	secretA = "whsec_" + base64.StdEncoding.EncodeToString([]byte("countersign-test-key-A-32-bytes!"))
	secretB = "whsec_" + base64.StdEncoding.EncodeToString([]byte("countersign-test-key-B-of-40-bytes-long!"))
)

const eventID = "0190d1a2-7b3c-7def-8123-456789abcdef"

var start = time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)

func request() contracts.ApprovalRequested {
	return contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: eventID,
		Kind:    contracts.KindToolApproval,
		Run:     contracts.Run{ID: "run-7", Agent: "billing-agent", RequestedBy: "alice"},
		ToolCall: &contracts.ToolCall{
			Name:            "refund",
			Arguments:       json.RawMessage(`{"amount":120,"currency":"EUR"}`),
			ArgumentsSHA256: "5d41402abc4b2a76b9719d911017c592",
		},
		Risk:             contracts.RiskHigh,
		Summary:          "Refund 120 EUR to order 991",
		Policy:           contracts.PolicyRef{Rule: "refunds", Version: "3"},
		Quorum:           contracts.Quorum{Required: 1, Approvers: []string{"bob"}, Veto: true, Order: contracts.OrderAny},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		Channels:         []string{contracts.ChannelWebhook},
		ExpiresAt:        start.Add(time.Hour),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        start,
	}
}

func target(name string) notifier.Target {
	return notifier.Target{Channel: contracts.ChannelWebhook, Address: name}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// delivery is one request as a receiver saw it.
type delivery struct {
	method string
	header http.Header
	body   []byte
}

// receiver is an HTTP endpoint that records what it gets and answers with
// respond, which is told the 1-based number of the request.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []delivery
	hits atomic.Int64
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(rc.hits.Add(1))
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: reading the body: %v", err)
		}
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{method: r.Method, header: r.Header.Clone(), body: body})
		rc.mu.Unlock()
		respond(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

type fixture struct {
	ch    *webhook.Channel
	clock *clock
	log   *notifiertest.Logs
}

// newChannel returns a channel over eps with a fake clock at start and a
// debug logger writing to a buffer.
func newChannel(t *testing.T, eps ...webhook.Endpoint) fixture {
	t.Helper()
	f := fixture{clock: &clock{t: start}, log: &notifiertest.Logs{}}
	ch, err := webhook.New(webhook.Config{
		Endpoints: eps,
		Now:       f.clock.Now,
		Logger:    f.log.Logger(),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.ch = ch
	return f
}

func keys(t *testing.T, secrets ...string) [][]byte {
	t.Helper()
	var ks [][]byte
	for _, s := range secrets {
		k, err := webhook.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	return ks
}

func assertTransient(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("delivery succeeded, want a transient error")
	}
	if errors.Is(err, notifier.ErrPermanent) {
		t.Fatalf("error %q is permanent, want transient", err)
	}
}

func assertPermanent(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, notifier.ErrPermanent) {
		t.Fatalf("error %v is not permanent", err)
	}
}

func TestNotifySendsSignedRequest(t *testing.T) {
	rc := newReceiver(t, status(http.StatusNoContent))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL + "/hooks/countersign", Secrets: []string{secretA}})
	req := request()
	n := notifier.Requested(req, target("ops"))

	receipt, err := f.ch.Notify(t.Context(), n)
	if err != nil {
		t.Fatalf("Notify: %v", err)
	}
	if receipt.Ref != n.IdempotencyKey() {
		t.Errorf("receipt Ref %q, want the webhook-id %q", receipt.Ref, n.IdempotencyKey())
	}

	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	d := got[0]
	if d.method != http.MethodPost {
		t.Errorf("method = %s, want POST", d.method)
	}
	wantHeaders := map[string]string{
		"Content-Type":         "application/json",
		"User-Agent":           "Countersign-Webhook/1",
		"webhook-id":           n.IdempotencyKey(),
		"webhook-timestamp":    strconv.FormatInt(start.Unix(), 10),
		"countersign-kind":     "requested",
		"countersign-event-id": eventID,
	}
	for k, v := range wantHeaders {
		if got := d.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	wantSig := webhook.Sign(keys(t, secretA)[0], n.IdempotencyKey(), start, d.body)
	if got := d.header.Get("webhook-signature"); got != wantSig {
		t.Errorf("webhook-signature = %q, want %q", got, wantSig)
	}
	if err := webhook.Verify(keys(t, secretA), d.header, d.body, start, 0); err != nil {
		t.Errorf("Verify: %v", err)
	}

	wantBody, _ := json.Marshal(req)
	if !bytes.Equal(d.body, wantBody) {
		t.Errorf("body\n got  %s\n want %s", d.body, wantBody)
	}
	var back contracts.ApprovalRequested
	if err := json.Unmarshal(d.body, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, req) {
		t.Errorf("body decodes to\n %+v\nwant\n %+v", back, req)
	}
}

// TestReminderHeaders: a reminder says its kind and carries its own
// idempotency key as webhook-id.
func TestReminderHeaders(t *testing.T) {
	rc := newReceiver(t, status(http.StatusOK))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	first := notifier.Requested(request(), target("ops"))
	reminder := notifier.Reminder(request(), target("ops"), 1)
	for _, n := range []notifier.Notification{first, reminder} {
		if _, err := f.ch.Notify(t.Context(), n); err != nil {
			t.Fatalf("Notify %s: %v", n.Kind, err)
		}
	}
	got := rc.deliveries()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	if got[1].header.Get("countersign-kind") != "reminder.1" || got[1].header.Get("webhook-id") != reminder.IdempotencyKey() {
		t.Errorf("reminder headers: kind %q, id %q", got[1].header.Get("countersign-kind"), got[1].header.Get("webhook-id"))
	}
}

// TestReferenceLibraryVerifiesDeliveries checks what the channel sends with
// the Standard Webhooks reference verifier, on the real clock, with one
// secret and with two (a rotation: each secret alone verifies).
func TestReferenceLibraryVerifiesDeliveries(t *testing.T) {
	rc := newReceiver(t, status(http.StatusAccepted))
	ch, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{
		{Name: "one", URL: rc.URL, Secrets: []string{secretA}},
		{Name: "rotating", URL: rc.URL, Secrets: []string{secretA, secretB}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"one", "rotating"} {
		if _, err := ch.Notify(t.Context(), notifier.Requested(request(), target(name))); err != nil {
			t.Fatalf("Notify %s: %v", name, err)
		}
	}
	rec := contracts.Record{Request: request(), Status: contracts.StatusExpired, UpdatedAt: time.Now()}
	if _, err := ch.Update(t.Context(), notifier.Decided(rec, target("rotating"), "")); err != nil {
		t.Fatalf("Update: %v", err)
	}

	got := rc.deliveries()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	verify := func(secret string, d delivery) error {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh.Verify(d.body, d.header)
	}
	if err := verify(secretA, got[0]); err != nil {
		t.Errorf("single secret: reference Verify: %v", err)
	}
	if err := verify(secretB, got[0]); err == nil {
		t.Error("single secret: the other secret verifies too")
	}
	for i, d := range got[1:] {
		if sigs := strings.Fields(d.header.Get("webhook-signature")); len(sigs) != 2 {
			t.Errorf("rotating delivery %d: %d signatures, want 2", i, len(sigs))
		}
		for _, s := range []string{secretA, secretB} {
			if err := verify(s, d); err != nil {
				t.Errorf("rotating delivery %d: reference Verify with one secret: %v", i, err)
			}
		}
		unrelated := "whsec_" + base64.StdEncoding.EncodeToString([]byte("an-unrelated-secret-of-32-bytes!"))
		if err := verify(unrelated, d); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			t.Errorf("rotating delivery %d: an unrelated secret: %v, want no matching signature", i, err)
		}
	}
}

// TestRetriedDeliveryKeepsWebhookID calls Notify as the notifier runtime
// would after two transient failures.
func TestRetriedDeliveryKeepsWebhookID(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	n := notifier.Requested(request(), target("ops"))

	var attempts []time.Time
	for i := range 3 {
		attempts = append(attempts, f.clock.Now())
		receipt, err := f.ch.Notify(t.Context(), n)
		if i < 2 {
			assertTransient(t, err)
			if !strings.Contains(err.Error(), `"ops" answered 500`) {
				t.Errorf("attempt %d: error %q does not name the endpoint and status", i+1, err)
			}
			if receipt.Status != notifier.ReceiptFailed || receipt.Permanent {
				t.Errorf("attempt %d: receipt %+v, want a transient failure", i+1, receipt)
			}
		} else if err != nil || receipt.Ref != n.IdempotencyKey() || receipt.Status != notifier.ReceiptDelivered {
			t.Fatalf("attempt 3: %+v, %v", receipt, err)
		}
		f.clock.Advance(5 * time.Second)
	}

	got := rc.deliveries()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	for i, d := range got {
		if id := d.header.Get("webhook-id"); id != n.IdempotencyKey() {
			t.Errorf("attempt %d: webhook-id %q, want %q", i+1, id, n.IdempotencyKey())
		}
		if ts := d.header.Get("webhook-timestamp"); ts != strconv.FormatInt(attempts[i].Unix(), 10) {
			t.Errorf("attempt %d: webhook-timestamp %s, want the attempt's time %d", i+1, ts, attempts[i].Unix())
		}
		if err := webhook.Verify(keys(t, secretA), d.header, d.body, attempts[i], time.Second); err != nil {
			t.Errorf("attempt %d: Verify: %v", i+1, err)
		}
	}
}

func TestTooManyRequestsHonoursRetryAfterSeconds(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
	assertTransient(t, err)
	if d, ok := notifier.RetryAfterOf(err); !ok || d != 7*time.Second {
		t.Errorf("RetryAfterOf = %v, %v; want 7s", d, ok)
	}
	if !strings.Contains(err.Error(), "429") {
		t.Errorf("error %q does not name the status", err)
	}
}

func TestUnavailableHonoursRetryAfterDate(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", start.Add(90*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
	assertTransient(t, err)
	if d, ok := notifier.RetryAfterOf(err); !ok || d != 90*time.Second {
		t.Errorf("RetryAfterOf = %v, %v; want 90s", d, ok)
	}
}

func TestRetryAfterIsCappedAtAnHour(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "604800")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
	if d, ok := notifier.RetryAfterOf(err); !ok || d != time.Hour {
		t.Errorf("RetryAfterOf = %v, %v; want 1h", d, ok)
	}
}

func TestTransientStatuses(t *testing.T) {
	for _, code := range []int{408, 429, 500, 502, 503, 504} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			rc := newReceiver(t, status(code))
			f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
			receipt, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
			assertTransient(t, err)
			if _, ok := notifier.RetryAfterOf(err); ok {
				t.Errorf("error %q asks for a delay without Retry-After", err)
			}
			if !strings.Contains(err.Error(), `endpoint "ops" answered `+strconv.Itoa(code)) {
				t.Errorf("error %q does not name the endpoint and status", err)
			}
			if receipt.Status != notifier.ReceiptFailed || receipt.Error != err.Error() || receipt.Permanent {
				t.Errorf("receipt %+v", receipt)
			}
		})
	}
}

func TestClientErrorsArePermanent(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 413, 422} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			rc := newReceiver(t, status(code))
			f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
			receipt, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
			assertPermanent(t, err)
			if !strings.Contains(err.Error(), `endpoint "ops" answered `+strconv.Itoa(code)) {
				t.Errorf("error %q does not name the endpoint and status", err)
			}
			if !receipt.Permanent || receipt.Status != notifier.ReceiptFailed {
				t.Errorf("receipt %+v, want a permanent failure", receipt)
			}
			// A 4xx does not disable the endpoint.
			if _, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops"))); err == nil || rc.hits.Load() != 2 {
				t.Errorf("second attempt: %v after %d requests, want another request", err, rc.hits.Load())
			}
		})
	}
}

func TestGoneDisablesEndpoint(t *testing.T) {
	gone := newReceiver(t, status(http.StatusGone))
	fine := newReceiver(t, status(http.StatusOK))
	f := newChannel(t,
		webhook.Endpoint{Name: "old", URL: gone.URL, Secrets: []string{secretA}},
		webhook.Endpoint{Name: "new", URL: fine.URL, Secrets: []string{secretA}})

	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("old")))
	assertPermanent(t, err)
	if !strings.Contains(err.Error(), `endpoint "old" disabled after 410 Gone`) {
		t.Errorf("error %q", err)
	}
	for _, n := range []notifier.Notification{
		notifier.Reminder(request(), target("old"), 1),
		notifier.Decided(contracts.Record{Request: request(), Status: contracts.StatusRejected}, target("old"), ""),
	} {
		var err error
		if n.Kind == notifier.KindDecided {
			_, err = f.ch.Update(t.Context(), n)
		} else {
			_, err = f.ch.Notify(t.Context(), n)
		}
		assertPermanent(t, err)
		if !strings.Contains(err.Error(), `endpoint "old" disabled after 410 Gone`) {
			t.Errorf("%s: error %q", n.Kind, err)
		}
	}
	if hits := gone.hits.Load(); hits != 1 {
		t.Errorf("the gone endpoint got %d requests, want 1", hits)
	}
	if _, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("new"))); err != nil {
		t.Errorf("another endpoint of the channel: %v", err)
	}
	if n := strings.Count(f.log.String(), "disabled after 410 Gone"); n != 1 {
		t.Errorf("logged the disabling %d times, want once:\n%s", n, f.log)
	}
	if !strings.Contains(f.log.String(), "endpoint=old") {
		t.Errorf("the log does not name the endpoint:\n%s", f.log)
	}
}

// TestGoneLogsOnceUnderConcurrency sends concurrently to an endpoint that
// answers 410 and expects one log line however many requests got the 410.
func TestGoneLogsOnceUnderConcurrency(t *testing.T) {
	rc := newReceiver(t, status(http.StatusGone))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			_, err := f.ch.Notify(t.Context(), notifier.Reminder(request(), target("ops"), i+1))
			if !errors.Is(err, notifier.ErrPermanent) {
				t.Errorf("Notify: %v, want permanent", err)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(f.log.String(), "disabled after 410 Gone"); n != 1 {
		t.Errorf("logged the disabling %d times, want once (%d requests got 410)", n, rc.hits.Load())
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	for _, custom := range []bool{false, true} {
		name := "default client"
		if custom {
			name = "client that follows redirects"
		}
		t.Run(name, func(t *testing.T) {
			elsewhere := newReceiver(t, status(http.StatusOK))
			rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+"/moved", http.StatusFound)
			})
			cfg := webhook.Config{Endpoints: []webhook.Endpoint{{Name: "ops", URL: rc.URL, Secrets: []string{secretA}}}}
			if custom {
				cfg.Client = &http.Client{}
			}
			ch, err := webhook.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.Notify(t.Context(), notifier.Requested(request(), target("ops")))
			assertPermanent(t, err)
			if !strings.Contains(err.Error(), `endpoint "ops" answered 302`) {
				t.Errorf("error %q does not name the endpoint and status", err)
			}
			if hits := elsewhere.hits.Load(); hits != 0 {
				t.Errorf("the redirect target got %d requests, want 0", hits)
			}
			if cfg.Client != nil && cfg.Client.CheckRedirect != nil {
				t.Error("New changed the caller's client")
			}
		})
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	f := newChannel(t, webhook.Endpoint{Name: "slow", URL: rc.URL, Secrets: []string{secretA}, Timeout: 50 * time.Millisecond})

	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("slow")))
	assertTransient(t, err)
	if !strings.Contains(err.Error(), `endpoint "slow": no response within 50ms`) {
		t.Errorf("error %q does not say the endpoint timed out", err)
	}
}

// TestConnectionRefusedIsDescribed: the error of an endpoint that refuses
// connections (transient, as the suite checks) says so without naming
// the host.
func TestConnectionRefusedIsDescribed(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	f := newChannel(t, webhook.Endpoint{Name: "down", URL: url, Secrets: []string{secretA}})
	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("down")))
	if err == nil || !strings.Contains(err.Error(), `endpoint "down": connection refused`) {
		t.Errorf("error %q", err)
	}
	assertHidden(t, err.Error(), strings.TrimPrefix(url, "http://"))
}

// TestUnknownEndpointErrors: an unknown endpoint (permanent, as the suite
// checks) is named when it is a name, and not echoed when it is a URL.
func TestUnknownEndpointErrors(t *testing.T) {
	rc := newReceiver(t, status(http.StatusOK))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})

	_, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("nope")))
	if err == nil || !strings.Contains(err.Error(), `no endpoint named "nope"`) {
		t.Errorf("error %v", err)
	}
	// A URL given as the address is not echoed.
	addr := rc.URL + "/tok_5e6f"
	_, err = f.ch.Update(t.Context(), notifier.Decided(contracts.Record{Request: request(), Status: contracts.StatusApproved}, target(addr), ""))
	assertPermanent(t, err)
	assertHidden(t, err.Error(), "tok_5e6f")
	if hits := rc.hits.Load(); hits != 0 {
		t.Errorf("the endpoint got %d requests, want 0", hits)
	}
}

func TestUpdateSendsDecided(t *testing.T) {
	rc := newReceiver(t, status(http.StatusOK))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA, secretB}})
	decidedAt := start.Add(3 * time.Minute)
	outcome := &contracts.Outcome{
		Decision:  contracts.DecisionApprove,
		Comment:   "ok for this customer",
		DecidedBy: []string{"bob"},
		DecidedAt: decidedAt,
	}
	approved := contracts.Record{
		Spec: contracts.SpecRecord, Request: request(), Status: contracts.StatusApproved,
		Outcome: outcome, UpdatedAt: decidedAt.Add(time.Second),
	}
	expiredReq := request()
	expiredReq.ToolCall = nil
	expired := contracts.Record{Spec: contracts.SpecRecord, Request: expiredReq, Status: contracts.StatusExpired, UpdatedAt: start.Add(time.Hour)}

	tests := []struct {
		name string
		rec  contracts.Record
		want contracts.Decided
	}{
		{"approved", approved, contracts.Decided{
			Spec: contracts.SpecDecided, EventID: eventID, Status: contracts.StatusApproved, Agent: "billing-agent",
			RunID: "run-7", ToolName: "refund", Outcome: outcome, DecidedAt: decidedAt,
		}},
		{"no outcome: decided when updated", expired, contracts.Decided{
			Spec: contracts.SpecDecided, EventID: eventID, Status: contracts.StatusExpired, Agent: "billing-agent",
			RunID: "run-7", DecidedAt: start.Add(time.Hour),
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := notifier.Decided(tt.rec, target("ops"), "")
			receipt, err := f.ch.Update(t.Context(), n)
			if err != nil || receipt.Ref != n.IdempotencyKey() || receipt.Kind != notifier.KindDecided {
				t.Fatalf("Update = %+v, %v", receipt, err)
			}
			got := rc.deliveries()
			if len(got) != i+1 {
				t.Fatalf("receiver got %d requests, want %d", len(got), i+1)
			}
			d := got[i]
			if d.header.Get("countersign-kind") != "decided" || d.header.Get("webhook-id") != n.IdempotencyKey() ||
				d.header.Get("countersign-event-id") != eventID {
				t.Errorf("headers %v", d.header)
			}
			if err := webhook.Verify(keys(t, secretB), d.header, d.body, start, 0); err != nil {
				t.Errorf("Verify: %v", err)
			}
			var back contracts.Decided
			if err := json.Unmarshal(d.body, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tt.want) {
				t.Errorf("body decodes to\n %+v\nwant\n %+v", back, tt.want)
			}
		})
	}
}

func TestSuccessWithLargeResponseBody(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.Write(bytes.Repeat([]byte("x"), 1<<20))
	})
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	if _, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target("ops"))); err != nil {
		t.Errorf("Notify: %v", err)
	}
}

// TestURLAndSecretNeverShown fails deliveries in every way to an endpoint
// whose URL holds a token and checks errors, receipts and logs (at debug
// level) for the URL, the token and the secrets.
func TestURLAndSecretNeverShown(t *testing.T) {
	const token = "tok_3a9c1e7f55"
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/"+token+"/") {
		case "400":
			w.WriteHeader(http.StatusBadRequest)
		case "503":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "302":
			http.Redirect(w, r, "/"+token+"/elsewhere", http.StatusFound)
		case "410":
			w.WriteHeader(http.StatusGone)
		case "slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	t.Cleanup(func() { close(release) })
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	url := func(path string) string { return rc.URL + "/" + token + "/" + path + "?key=" + token }
	eps := []webhook.Endpoint{
		{Name: "e400", URL: url("400"), Secrets: []string{secretA}},
		{Name: "e503", URL: url("503"), Secrets: []string{secretA}},
		{Name: "e302", URL: url("302"), Secrets: []string{secretA}},
		{Name: "e410", URL: url("410"), Secrets: []string{secretA, secretB}},
		{Name: "eslow", URL: url("slow"), Secrets: []string{secretA}, Timeout: 20 * time.Millisecond},
		{Name: "edown", URL: closed.URL + "/" + token, Secrets: []string{secretA}},
	}
	f := newChannel(t, eps...)
	var texts []string
	for _, name := range []string{"e400", "e503", "e302", "e410", "e410", "eslow", "edown", rc.URL + "/" + token} {
		receipt, err := f.ch.Notify(t.Context(), notifier.Requested(request(), target(name)))
		if err == nil {
			t.Fatalf("%s: delivery succeeded", name)
		}
		texts = append(texts, err.Error(), receipt.Error)
	}
	texts = append(texts, f.log.String())
	if !strings.Contains(f.log.String(), "endpoint=e410") {
		t.Fatalf("nothing was logged about e410:\n%s", f.log)
	}
	for _, text := range texts {
		assertHidden(t, text, token)
		assertHidden(t, text, rc.URL)
		assertHidden(t, text, strings.TrimPrefix(rc.URL, "http://"))
		assertHidden(t, text, strings.TrimPrefix(closed.URL, "http://"))
		for _, s := range []string{secretA, secretB} {
			assertHidden(t, text, strings.TrimPrefix(s, "whsec_"))
		}
	}
}

func TestUnencodableRequestIsPermanent(t *testing.T) {
	rc := newReceiver(t, status(http.StatusOK))
	f := newChannel(t, webhook.Endpoint{Name: "ops", URL: rc.URL, Secrets: []string{secretA}})
	req := request()
	req.ToolCall.Arguments = json.RawMessage(`{"amount":`)
	_, err := f.ch.Notify(t.Context(), notifier.Requested(req, target("ops")))
	assertPermanent(t, err)
	if hits := rc.hits.Load(); hits != 0 {
		t.Errorf("the endpoint got %d requests, want 0", hits)
	}
}

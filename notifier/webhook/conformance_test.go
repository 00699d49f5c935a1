package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/notifier/webhook"
)

// TestConformance runs the suite every channel passes against a real HTTP
// receiver with two endpoints.
func TestConformance(t *testing.T) {
	notifiertest.TestChannel(t, notifiertest.Harness{New: conformanceSetup})
}

// conformanceToken is the secret part of the endpoints' URLs.
const conformanceToken = "tok_8d0c55e1b7a2"

func conformanceSetup(t *testing.T, env notifiertest.Env) notifiertest.Setup {
	rc := &hookReceiver{keys: keys(t, secretA, secretB), now: env.Now}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	var eps []webhook.Endpoint
	for _, name := range []string{"ops", "audit"} {
		eps = append(eps, webhook.Endpoint{
			Name: name, URL: srv.URL + "/hooks/" + name + "?token=" + conformanceToken, Secrets: []string{secretA, secretB},
		})
	}
	ch, err := webhook.New(webhook.Config{Endpoints: eps, Client: srv.Client(), Now: env.Now, Logger: env.Logger})
	if err != nil {
		t.Fatal(err)
	}
	return notifiertest.Setup{
		Channel: ch,
		Targets: [2]notifier.Target{target("ops"), target("audit")},
		Unknown: notifier.Target{Channel: contracts.ChannelWebhook, Address: "nope"},
		Received: func() []notifiertest.Delivery {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			return slices.Clone(rc.accepted)
		},
		Fail: func(permanent bool) {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.fail = append(rc.fail, map[bool]int{true: http.StatusUnprocessableEntity, false: http.StatusServiceUnavailable}[permanent])
		},
		Stop: srv.Close,
		Secrets: []string{
			conformanceToken,
			strings.TrimPrefix(secretA, "whsec_"), strings.TrimPrefix(secretB, "whsec_"),
		},
	}
}

// hookReceiver answers every POST to /hooks/<name> whose signature verifies
// with 204, or with the next status queued in fail, and keeps what it
// accepted. A webhook is told apart by its webhook-id; all of an
// approval's are one thread.
type hookReceiver struct {
	keys [][]byte
	now  func() time.Time

	mu       sync.Mutex
	fail     []int
	accepted []notifiertest.Delivery
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	name, ok := strings.CutPrefix(r.URL.Path, "/hooks/")
	if err != nil || !ok || r.Method != http.MethodPost || r.URL.Query().Get("token") != conformanceToken {
		http.Error(w, "not a delivery", http.StatusBadRequest)
		return
	}
	if err := webhook.Verify(h.keys, r.Header, body, h.now(), 0); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.fail) > 0 {
		w.WriteHeader(h.fail[0])
		h.fail = h.fail[1:]
		return
	}
	var content []string
	for k, vs := range r.Header {
		for _, v := range vs {
			content = append(content, k+": "+v)
		}
	}
	slices.Sort(content)
	h.accepted = append(h.accepted, notifiertest.Delivery{
		To:      name,
		Key:     r.Header.Get(webhook.HeaderID),
		Thread:  r.Header.Get(webhook.HeaderEventID),
		Content: strings.Join(append(content, string(body)), "\n"),
	})
	w.WriteHeader(http.StatusNoContent)
}

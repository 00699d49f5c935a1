package chaos

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/countersign/countersign/notifier/webhook"
)

// receiver is the webhook endpoint of the harness: it verifies every
// delivery's Standard Webhooks signature and de-duplicates by webhook-id,
// as a receiver of Countersign's webhooks must.
type receiver struct {
	keys [][]byte
	srv  *httptest.Server

	mu       sync.Mutex
	raw      int
	ids      map[string]hookKey      // webhook-id → what it announced
	byKey    map[hookKey][]string    // (event, kind) → distinct webhook-ids
	bad      []string                // deliveries that failed verification or decoding
	changed  chan struct{}           // closed and replaced on every new notification
	firstAt  map[hookKey]time.Time   // when a notification was first processed
	payloads map[hookKey]hookPayload // the processed (de-duplicated) payload
}

type hookKey struct {
	eventID string
	spec    string
}

type hookPayload struct {
	Spec    string `json:"spec"`
	EventID string `json:"event_id"`
	Status  string `json:"status"`
}

func newReceiver(key []byte) *receiver {
	r := &receiver{
		keys: [][]byte{key}, ids: map[string]hookKey{}, byKey: map[hookKey][]string{},
		changed: make(chan struct{}), firstAt: map[hookKey]time.Time{}, payloads: map[hookKey]hookPayload{},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

func (r *receiver) close() { r.srv.Close() }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw++
	if err := webhook.Verify(r.keys, req.Header, body, time.Now(), 0); err != nil {
		r.bad = append(r.bad, "signature: "+err.Error())
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderID)
	if _, dup := r.ids[id]; dup {
		w.WriteHeader(http.StatusNoContent) // already processed
		return
	}
	var p hookPayload
	if err := json.Unmarshal(body, &p); err != nil || p.EventID == "" || p.Spec == "" {
		r.bad = append(r.bad, "undecodable body: "+string(body))
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	k := hookKey{eventID: p.EventID, spec: p.Spec}
	r.ids[id] = k
	r.byKey[k] = append(r.byKey[k], id)
	if _, ok := r.firstAt[k]; !ok {
		r.firstAt[k] = time.Now()
		r.payloads[k] = p
	}
	close(r.changed)
	r.changed = make(chan struct{})
	w.WriteHeader(http.StatusNoContent)
}

// waitUntil blocks until ok (called under the lock) holds or the deadline
// passes, waking on every new notification.
func (r *receiver) waitUntil(deadline time.Time, ok func() bool) bool {
	for {
		r.mu.Lock()
		done := ok()
		ch := r.changed
		r.mu.Unlock()
		if done {
			return true
		}
		d := time.Until(deadline)
		if d <= 0 {
			return false
		}
		select {
		case <-ch:
		case <-time.After(d):
		}
	}
}

// has reports (under the lock) whether a notification of spec for id was processed.
func (r *receiver) has(id, spec string) bool {
	_, ok := r.firstAt[hookKey{eventID: id, spec: spec}]
	return ok
}

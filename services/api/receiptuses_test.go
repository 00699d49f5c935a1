package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// TestReceiptUse: POST /v1/receipts/use records a receipt's use once, for
// every replica of the API and every kind of token: the first use answers
// 200 {"used":true}, every later one 409 receipt_replayed, and the entry is
// stored under the jti's SHA-256 in hitl_receipt_uses.
func TestReceiptUse(t *testing.T) {
	e := setup(t)
	exp := time.Now().Add(5 * time.Minute).Unix()
	body := map[string]any{"jti": "rcpt-01J9Z", "exp": exp}

	r := e.call(t, http.MethodPost, "/v1/receipts/use", "agent", body)
	if r.status != http.StatusOK {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	var ok struct {
		Used bool `json:"used"`
	}
	r.decode(t, &ok)
	if !ok.Used {
		t.Fatalf("first use answered %s", r.body)
	}
	// A replay, through another replica and with another token, is refused.
	other := e.replica(t, nil)
	e2 := *e
	e2.url = other
	e2.call(t, http.MethodPost, "/v1/receipts/use", "alice", body).wantError(t, http.StatusConflict, api.CodeReceiptReplayed, "")
	e.call(t, http.MethodPost, "/v1/receipts/use", "agent", body).wantError(t, http.StatusConflict, api.CodeReceiptReplayed, "")

	kv, err := e.js.KeyValue(context.Background(), contracts.BucketReceiptUses)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), contracts.ReceiptUseKey("rcpt-01J9Z"))
	if err != nil {
		t.Fatalf("the use is not stored under the jti's SHA-256: %v", err)
	}
	if entry.Revision() == 0 || len(entry.Value()) == 0 {
		t.Fatalf("stored entry %+v", entry)
	}
	if st, err := e.js.Stream(context.Background(), "KV_"+contracts.BucketReceiptUses); err != nil {
		t.Fatal(err)
	} else if age := st.CachedInfo().Config.MaxAge; age < time.Hour {
		t.Fatalf("hitl_receipt_uses keeps entries for %s, less than a receipt may live", age)
	}
}

// TestReceiptUseConcurrent: of many replicas using one receipt at once,
// exactly one is told it is the first.
func TestReceiptUseConcurrent(t *testing.T) {
	e := setup(t)
	urls := []string{e.url, e.replica(t, nil), e.replica(t, nil)}
	body := map[string]any{"jti": "rcpt-race", "exp": time.Now().Add(time.Minute).Unix()}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ei := *e
			ei.url = urls[i%len(urls)]
			r := ei.call(t, http.MethodPost, "/v1/receipts/use", "agent", body)
			mu.Lock()
			statuses[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[http.StatusOK] != 1 || statuses[http.StatusConflict] != 11 {
		t.Fatalf("answers by status %v, want one 200 and eleven 409", statuses)
	}
}

// TestReceiptUseBadRequests: a use needs a token, a jti and an exp within
// contracts.ReceiptUseHorizon; the body is decoded strictly. A refused
// request records nothing.
func TestReceiptUseBadRequests(t *testing.T) {
	e := setup(t)
	exp := time.Now().Add(time.Minute).Unix()
	far := time.Now().Add(contracts.ReceiptUseHorizon + time.Minute).Unix()
	long := fmt.Sprintf("%01025d", 0)
	for _, c := range []struct {
		name        string
		token       string
		body        any
		status      int
		code, field string
	}{
		{"no token", "", map[string]any{"jti": "a", "exp": exp}, http.StatusUnauthorized, api.CodeUnauthenticated, ""},
		{"no jti", "agent", map[string]any{"exp": exp}, http.StatusBadRequest, api.CodeInvalidField, "jti"},
		{"empty jti", "agent", map[string]any{"jti": "", "exp": exp}, http.StatusBadRequest, api.CodeInvalidField, "jti"},
		{"long jti", "agent", map[string]any{"jti": long, "exp": exp}, http.StatusBadRequest, api.CodeInvalidField, "jti"},
		{"no exp", "agent", map[string]any{"jti": "a"}, http.StatusBadRequest, api.CodeInvalidField, "exp"},
		{"exp a string", "agent", `{"jti":"a","exp":"soon"}`, http.StatusBadRequest, api.CodeInvalidJSON, "exp"},
		{"exp a fraction", "agent", `{"jti":"a","exp":1.5}`, http.StatusBadRequest, api.CodeInvalidJSON, "exp"},
		{"exp too far", "agent", map[string]any{"jti": "a", "exp": far}, http.StatusBadRequest, api.CodeInvalidField, "exp"},
		{"unknown field", "agent", map[string]any{"jti": "a", "exp": exp, "tool": "x"}, http.StatusBadRequest, api.CodeUnknownField, "tool"},
		{"not JSON", "agent", `{"jti":`, http.StatusBadRequest, api.CodeInvalidJSON, ""},
		{"empty body", "agent", ``, http.StatusBadRequest, api.CodeInvalidJSON, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(t, http.MethodPost, "/v1/receipts/use", c.token, c.body).wantError(t, c.status, c.code, c.field)
		})
	}
	kv, err := e.js.KeyValue(context.Background(), contracts.BucketReceiptUses)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), contracts.ReceiptUseKey("a")); err != jetstream.ErrKeyNotFound {
		t.Fatalf("a refused use was recorded: %v", err)
	}
	// The same jti is still usable once.
	if r := e.call(t, http.MethodPost, "/v1/receipts/use", "agent", map[string]any{"jti": "a", "exp": exp}); r.status != http.StatusOK {
		t.Fatalf("first use after refusals: %d %s", r.status, r.body)
	}
}

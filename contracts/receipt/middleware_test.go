package receipt_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts/receipt"
)

func TestMiddlewareRunsOnlyWithAValidReceipt(t *testing.T) {
	k := seedKey(t, "a")
	clk := &clock{t: fixtureNow}
	s, _ := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now})
	body := `{"amount":1250,"currency":"EUR"}`
	tok, _ := s.Sign(approvalClaims(t, "payments.send", body))
	var ran int
	h := receipt.Middleware(receipt.MiddlewareConfig{
		Tool:    "payments.send",
		Options: receipt.Options{Keys: receipt.NewKeySet(k), Replay: receipt.NewMemoryReplayStore(), Now: clk.Now},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran++
		c, ok := receipt.FromContext(r.Context())
		got, _ := io.ReadAll(r.Body)
		if !ok || c.Tool != "payments.send" || string(got) != body {
			t.Errorf("handler saw claims %v (%v) and body %s", c, ok, got)
		}
	}))
	do := func(tok, body string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
		if tok != "" {
			req.Header.Set(receipt.Header, tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e.Error.Code
	}
	for _, c := range []struct {
		name, tok, body string
		status          int
		code            string
	}{
		{"no receipt", "", body, 401, "receipt_missing"},
		{"one byte changed", tok, strings.Replace(body, "1250", "1251", 1), 403, "receipt_arguments_differ"},
		{"valid", tok, body, 200, ""},
		{"replayed", tok, body, 409, "receipt_replayed"},
	} {
		if status, code := do(c.tok, c.body); status != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, code, c.status, c.code)
		}
	}
	if ran != 1 {
		t.Fatalf("the tool ran %d times, want once", ran)
	}
}

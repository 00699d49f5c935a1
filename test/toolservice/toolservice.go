// Package toolservice is an example tool service that enforces approvals
// itself: it runs a payment only with a Countersign receipt for exactly the
// request's arguments, verified against the issuer's published keys, once.
// The end-to-end tests run it against a real `countersign serve`;
// docs/receipts.md shows the same lines.
package toolservice

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts/receipt"
)

// Config of the service.
type Config struct {
	// JWKSURL is Countersign's /.well-known/jwks.json.
	JWKSURL string
	// KeysTTL and KeysRefresh tune the key cache (defaults of receipt.Fetcher).
	KeysTTL, KeysRefresh time.Duration
}

// Service is the tool service; Ran lists the calls it executed.
type Service struct {
	http.Handler
	mu  sync.Mutex
	ran []json.RawMessage
}

// New returns the service: POST /payments.send and POST /payments.refund,
// each taking its JSON arguments as the body.
func New(cfg Config) (*Service, error) {
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: cfg.JWKSURL, TTL: cfg.KeysTTL, MinRefresh: cfg.KeysRefresh})
	if err != nil {
		return nil, err
	}
	s := &Service{}
	mux := http.NewServeMux()
	for _, tool := range []string{"payments.send", "payments.refund"} {
		run := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var args json.RawMessage
			if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			s.mu.Lock()
			s.ran = append(s.ran, args)
			s.mu.Unlock()
			c, _ := receipt.FromContext(r.Context())
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"ran": tool, "approved_by": c.DecidedBy, "event_id": c.EventID})
		})
		// The lines a tool owner adds: verify the receipt header against
		// the tool's name and the request body before anything runs.
		mux.Handle("POST /"+tool, receipt.Middleware(receipt.MiddlewareConfig{
			Tool:    tool,
			Options: receipt.Options{Keys: keys},
		}, run))
	}
	s.Handler = mux
	return s, nil
}

// Ran returns the arguments of every call the service executed.
func (s *Service) Ran() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.ran...)
}

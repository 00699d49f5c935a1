package api

import (
	"encoding/json"
	"net/http"

	"github.com/countersign/countersign/contracts/receipt"
)

// getJWKS answers GET /.well-known/jwks.json: the public keys receipts are
// verified with (Config.ReceiptKeys), for any caller and cacheable — tools
// fetch it with receipt.Fetcher or the TypeScript and Python verifiers.
// Without receipt keys the set is empty, and no receipt verifies.
func (s *Server) getJWKS(w http.ResponseWriter, _ *http.Request) {
	set := s.cfg.ReceiptKeys
	if set == nil {
		set = receipt.NewKeySet()
	}
	data, err := json.Marshal(set.JWKS())
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, CodeInternal, "the key set could not be encoded"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jwk-set+json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(append(data, '\n'))
}

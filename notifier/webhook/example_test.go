package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/countersign/countersign/notifier/webhook"
)

// ExampleVerify is a receiver of Countersign's webhooks: it verifies the
// signature over the raw body before decoding anything, and refuses a
// message whose body was changed on the way.
func ExampleVerify() {
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	receive := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := webhook.Verify([][]byte{key}, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// Drop an r.Header.Get("webhook-id") seen before, then decode body
		// according to r.Header.Get("countersign-kind").
		w.WriteHeader(http.StatusNoContent)
	}

	// What Countersign would send.
	body := []byte(`{"spec":"countersign.approval.decided/v1","event_id":"0190d1a2-7b3c-7def-8123-456789abcdef","status":"approved"}`)
	send := func(body []byte) *http.Request {
		sent := time.Now()
		r := httptest.NewRequest(http.MethodPost, "/hooks/countersign", bytes.NewReader(body))
		r.Header.Set("webhook-id", "6a0c56d1e2b4f8a9c3d7e5f1a2b3c4d5")
		r.Header.Set("webhook-timestamp", strconv.FormatInt(sent.Unix(), 10))
		r.Header.Set("webhook-signature", webhook.Sign(key, "6a0c56d1e2b4f8a9c3d7e5f1a2b3c4d5", sent, body))
		return r
	}

	w := httptest.NewRecorder()
	receive(w, send(body))
	fmt.Println("genuine:", w.Code)

	r := send(body)
	r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("approved"), []byte("rejected"), 1)))
	w = httptest.NewRecorder()
	receive(w, r)
	fmt.Print("tampered: ", w.Code, " ", w.Body.String())
	// Output:
	// genuine: 204
	// tampered: 401 webhook: no matching signature
}

package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A bus that cannot serve (no JetStream quorum, no responders, timeouts) is
// 503 unavailable, which clients retry; anything else is a 500.
func TestBackendErrorMapsUnavailability(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	quorumLost := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("read record: %w", quorumLost), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		{nats.ErrNoResponders, http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", jetstream.ErrNoStreamResponse), http.StatusServiceUnavailable},
		{&jetstream.APIError{Code: 400, ErrorCode: 10059, Description: "stream not found"}, http.StatusInternalServerError},
		{errors.New("something else"), http.StatusInternalServerError},
	} {
		got := s.backendError("op", c.err)
		if got.Status != c.want || (c.want == http.StatusServiceUnavailable && got.Code != CodeUnavailable) {
			t.Errorf("%v → %d %s, want %d", c.err, got.Status, got.Code, c.want)
		}
	}
}

package auditsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier/webhook"
)

// httpSink POSTs each entry, signed per Standard Webhooks.
type httpSink struct {
	s      *Sink
	keys   [][]byte
	client *http.Client
	now    func() time.Time
}

func newHTTPSink(s *Sink, client *http.Client, now func() time.Time) (*httpSink, error) {
	h := &httpSink{s: s, client: client, now: now}
	for _, sec := range s.Secrets {
		k, err := webhook.ParseSecret(sec)
		if err != nil {
			return nil, err
		}
		h.keys = append(h.keys, k)
	}
	return h, nil
}

func (h *httpSink) close() {}

// MessageID is the webhook-id of the entry at its place in the log: the same on
// every retry, so a receiver drops what it has already taken.
func MessageID(at audit.Pos) string { return "countersign-audit-" + at.String() }

// deliver POSTs body: a 2xx accepts it; 408, 429 and 5xx (after
// Retry-After when given) and failures to connect are tried again; any
// other answer refuses it for good.
func (h *httpSink) deliver(ctx context.Context, at audit.Pos, _ *audit.Entry, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, h.s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.s.URL, bytes.NewReader(body))
	if err != nil {
		return events.Poison(fmt.Errorf("request: %w", err))
	}
	for k, v := range h.s.Headers {
		req.Header.Set(k, v)
	}
	id, ts := MessageID(at), h.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	sigs := ""
	for i, k := range h.keys {
		if i > 0 {
			sigs += " "
		}
		sigs += webhook.Sign(k, id, ts, body)
	}
	req.Header.Set(webhook.HeaderSignature, sigs)
	resp, err := h.client.Do(req)
	if err != nil {
		// A *url.Error's text names the URL, which may hold a token: say
		// what lies under it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("POST to sink %s: %w", h.s.Name, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		err := fmt.Errorf("sink %s answered %d", h.s.Name, code)
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), h.now()); ok {
			return events.Retry(min(after, h.s.MaxBackoff), err)
		}
		return err
	default:
		return events.Poison(fmt.Errorf("sink %s refused the entry: %d", h.s.Name, code))
	}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

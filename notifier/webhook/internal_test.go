package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"7", 7 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"3600", time.Hour, true},
		{"3601", time.Hour, true},
		{"99999999999", time.Hour, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), time.Hour, true},
		{now.Add(45 * time.Second).Format(time.RFC850), 45 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{"0", 0, false},
		{"", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		d, ok := retryAfter(tt.value, now)
		if d != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.value, d, ok, tt.want, tt.ok)
		}
	}
}

// TestDescribe classifies network errors as net/http returns them, wrapped
// in a *url.Error that names the URL, and never repeats their text.
func TestDescribe(t *testing.T) {
	const u = "https://hooks.example.com/in/tok_77?key=tok_77"
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: u, Err: err} }
	op := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 443}, Err: err}
	}
	tests := []struct {
		err  error
		want string
	}{
		{wrap(op(&net.DNSError{Err: "no such host", Name: "hooks.example.com", IsNotFound: true})), "DNS lookup failed"},
		{wrap(op(fmt.Errorf("connect: %w", syscall.ECONNREFUSED))), "connection refused"},
		{wrap(op(syscall.ECONNRESET)), "connection reset"},
		{wrap(op(syscall.EHOSTUNREACH)), "host unreachable"},
		{wrap(errors.New("EOF")), "request failed"},
		{wrap(fmt.Errorf("read: %w", io.ErrUnexpectedEOF)), "connection closed before a response"},
		{wrap(context.DeadlineExceeded), "network timeout"},
	}
	for _, tt := range tests {
		got := describe(tt.err)
		if got != tt.want {
			t.Errorf("describe(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

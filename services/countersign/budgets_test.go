package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/countersign/countersign/services/api"
)

// budgetServer serves h as serve does, with the budgets of src (a
// countersign.yaml budgets: section), on a loopback port; it returns the
// address and the refusals counter.
func budgetServer(t *testing.T, src string, h http.Handler) (string, *budgetListener) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "countersign.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Budgets.validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bl := newBudgetListener(ln, fc.Budgets.MaxConnections, fc.Budgets.MaxConnectionsPerAddress, fc.Budgets.write, api.NewBudgetRefusals())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	serveHTTP(ctx, &wg, errc, bl, fc.Budgets.httpServer(h))
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ln.Addr().String(), bl
}

// closedWithin reports whether the server closes c within d: a read
// returns EOF or a reset (not the read's own deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
}

// A kept-alive connection idle past idle_timeout is closed; one that sends
// its request or body slower than read_timeout is cut off.
func TestIdleAndSlowConnectionsAreClosed(t *testing.T) {
	addr, _ := budgetServer(t, "budgets:\n  idle_timeout: 200ms\n  read_header_timeout: 300ms\n  read_timeout: 300ms\n", healthz())

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	// Generous: the server closes it after 200 ms; a wait of 20 s is a
	// bound that no machine, however slow, makes the server miss.
	if !closedWithin(idle, 20*time.Second) {
		t.Fatal("an idle kept-alive connection stayed open past idle_timeout")
	}

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(slow, 20*time.Second) {
		t.Fatal("a request whose body never arrives held its connection past read_timeout")
	}

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedWithin(silent, 20*time.Second) {
		t.Fatal("a connection that sends nothing stayed open past read_header_timeout")
	}
}

// A long-lived stream outlives read_timeout and write_timeout while its
// client reads it; a client that stops reading is cut off by the write
// timeout, and the handler sees its write fail.
func TestStreamsOutliveTimeoutsButNotAStalledReader(t *testing.T) {
	const events = 12
	stalled := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Path == "/flood" {
			chunk := []byte(strings.Repeat("x", 64<<10))
			for {
				if _, err := w.Write(chunk); err != nil {
					stalled <- err
					return
				}
			}
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range events {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	})
	// The stream lasts 600 ms, twice each timeout.
	addr, _ := budgetServer(t, "budgets:\n  read_header_timeout: 300ms\n  read_timeout: 300ms\n  write_timeout: 300ms\n  idle_timeout: 300ms\n", h)

	resp, err := http.Get("http://" + addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(body), "data: ") != events {
		t.Fatalf("the stream ended early: %d events, %v", strings.Count(string(body), "data: "), err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	if _, err := io.WriteString(c, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stalled:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Logf("the stalled stream's write failed with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client that stopped reading held its stream past write_timeout")
	}
}

// Connections over max_connections_per_address, or over max_connections,
// are answered 429 too_many_connections with Retry-After and closed;
// closing one makes room.
func TestConnectionBudgets(t *testing.T) {
	addr, bl := budgetServer(t, "budgets:\n  max_connections: 3\n  max_connections_per_address: 2\n", healthz())
	released := make(chan string, 16)
	bl.mu.Lock()
	bl.released = released
	bl.mu.Unlock()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// request sends one request on c and returns the answer.
	request := func(c net.Conn) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	wantRefused := func(c net.Conn, budget string) {
		t.Helper()
		resp := request(c)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("over %s: %d, Retry-After %q", budget, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		var m dto.Metric
		if err := bl.refused.WithLabelValues(budget).Write(&m); err != nil || m.GetCounter().GetValue() < 1 {
			got := m.GetCounter().GetValue()
			t.Fatalf("%s refusals counted %v", budget, got)
		}
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	for _, c := range []net.Conn{a1, a2} {
		if resp := request(c); resp.StatusCode != http.StatusOK {
			t.Fatalf("within the budget: %d", resp.StatusCode)
		}
	}
	wantRefused(dial("127.0.0.1"), api.BudgetConnectionsPerAddress)
	b1 := dial("127.0.0.2")
	if resp := request(b1); resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
	wantRefused(dial("127.0.0.3"), api.BudgetConnections)
	// A closed connection gives its place back once the server sees it
	// close; the next one may be refused until then.
	a1.Close()
	timeout := time.After(20 * time.Second)
	for given := ""; given != "127.0.0.1"; {
		select {
		case given = <-released:
		case <-timeout:
			t.Fatal("a closed connection's place was not given back")
		}
	}
	if resp := request(dial("127.0.0.3")); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a place was given back: %d", resp.StatusCode)
	}
}

// Budgets in countersign.yaml are checked, each problem naming its key.
func TestBudgetsConfigIsValidated(t *testing.T) {
	for _, c := range []struct{ src, key string }{
		{"budgets:\n  idle_timeout: soon\n", "budgets.idle_timeout"},
		{"budgets:\n  read_timeout: -1s\n", "budgets.read_timeout"},
		{"budgets:\n  read_header_timeout: 1m\n  read_timeout: 10s\n", "budgets.read_header_timeout"},
		{"budgets:\n  max_connections: -5\n", "budgets.max_connections"},
		{"budgets:\n  pending_per_agent: -2\n", "budgets.pending_per_agent"},
		{"budgets:\n  review_rate: -3\n", "budgets.review_rate"},
		{"budgets:\n  vote_burst: -1\n", "budgets.vote_burst"},
		{"budgets:\n  streams: 4\n", "streams"},
		{"metrics:\n  access: public\n", "metrics.access"},
		{"metrics:\n  listen: nowhere\n", "metrics.listen"},
		{"metrics:\n  tokens: [abc]\n", "metrics.tokens[0]"},
	} {
		path := filepath.Join(t.TempDir(), "countersign.yaml")
		if err := os.WriteFile(path, []byte(c.src), 0o600); err != nil {
			t.Fatal(err)
		}
		fc, err := loadConfig(path)
		if err == nil {
			cfg := serveConfig{fileConfig: fc}
			err = cfg.validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%q: %v, want an error naming %s", c.src, err, c.key)
		}
	}
	// The defaults are valid, and are what docs/security.md says.
	cfg := serveConfig{fileConfig: defaultConfig()}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	b := cfg.Budgets
	if b.idle != defaultIdleTimeout || b.read != defaultReadTimeout || b.write != defaultWriteTimeout || b.MaxConnections != defaultMaxConnections {
		t.Fatalf("defaults: %+v", b)
	}
}

// /metrics is open on a loopback address by default and needs a token on
// any other; metrics.listen moves it to an address of its own.
func TestMetricsAccessDefaults(t *testing.T) {
	for _, c := range []struct {
		m    metricsConfig
		addr string
		want string
	}{
		{metricsConfig{}, "127.0.0.1:8080", api.MetricsOpen},
		{metricsConfig{}, "[::1]:8080", api.MetricsOpen},
		{metricsConfig{}, "localhost:8080", api.MetricsOpen},
		{metricsConfig{}, "0.0.0.0:8080", api.MetricsToken},
		{metricsConfig{}, ":8080", api.MetricsToken},
		{metricsConfig{Listen: "0.0.0.0:9464"}, "0.0.0.0:8080", api.MetricsOff},
		{metricsConfig{Access: "token"}, "127.0.0.1:8080", api.MetricsToken},
		{metricsConfig{Access: "open"}, "0.0.0.0:8080", api.MetricsOpen},
	} {
		if got := c.m.access(c.addr); got != c.want {
			t.Errorf("%+v on %s: %s, want %s", c.m, c.addr, got, c.want)
		}
	}
}

// The deployment's configuration files load and validate, budgets and
// metrics included; the local one states the defaults.
func TestDeployConfigsSetValidBudgets(t *testing.T) {
	for _, path := range []string{"../../deploy/countersign.yaml", "../../deploy/cluster/countersign.yaml"} {
		fc, err := loadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := serveConfig{fileConfig: fc}
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	fc, _ := loadConfig("../../deploy/countersign.yaml")
	b := fc.Budgets
	want := budgetsConfig{ReadHeaderTimeout: "10s", ReadTimeout: "30s", WriteTimeout: "30s", IdleTimeout: "30s",
		MaxConnections: defaultMaxConnections, MaxConnectionsPerAddress: defaultMaxConnectionsPerAddress,
		Budgets: api.Budgets{ReviewRate: api.DefaultReviewRate, ReviewBurst: api.DefaultReviewBurst, VoteRate: api.DefaultVoteRate,
			VoteBurst: api.DefaultVoteBurst, StreamsPerPrincipal: api.DefaultStreamsPerPrincipal,
			PendingPerAgent: api.DefaultPendingPerAgent, PendingPerTenant: api.DefaultPendingPerTenant}}
	if b != want {
		t.Fatalf("deploy/countersign.yaml budgets %+v, want the defaults %+v", b, want)
	}
	if fc.Metrics.access(fc.Addr) != api.MetricsOpen {
		t.Fatalf("make run's /metrics: %s, want open on loopback", fc.Metrics.access(fc.Addr))
	}
}

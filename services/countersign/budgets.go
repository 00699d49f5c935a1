package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/services/api"
)

// budgetsConfig is countersign.yaml's budgets: what one connection, one
// address and one principal may take of the server (DESIGN §6). The
// principal's budgets are the API's (api.Budgets); the connection's are
// the HTTP server's. A zero or absent value takes its default; for the
// principal's budgets and the connection counts, -1 turns the budget off.
type budgetsConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers, and
	// ReadTimeout the whole request with its body: a client that sends
	// slower is cut off. Once the body is read, the response may take as
	// long as it needs (long polls, event streams).
	ReadHeaderTimeout string `yaml:"read_header_timeout"`
	ReadTimeout       string `yaml:"read_timeout"`
	// WriteTimeout bounds each write of a response: a client that stops
	// reading is cut off, while a live event stream that is read lasts.
	WriteTimeout string `yaml:"write_timeout"`
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout string `yaml:"idle_timeout"`
	// MaxConnections bounds the HTTP connections open at once, and
	// MaxConnectionsPerAddress those from one remote address; one more is
	// answered 429 too_many_connections and closed before anything is read.
	// MaxConnections is also kept below the process's file limit.
	MaxConnections           int `yaml:"max_connections"`
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
	api.Budgets              `yaml:",inline"`

	// The parsed durations (validate).
	readHeader, read, write, idle time.Duration
}

// Connection budget defaults.
const (
	defaultReadHeaderTimeout        = 10 * time.Second
	defaultReadTimeout              = 30 * time.Second
	defaultWriteTimeout             = 30 * time.Second
	defaultIdleTimeout              = 30 * time.Second
	defaultMaxConnections           = 4096
	defaultMaxConnectionsPerAddress = 256
	// fdReserve is how many file descriptors are kept for everything but
	// HTTP connections (NATS, the store, logs).
	fdReserve = 256
)

// validate parses and checks the budgets, naming the key of each problem.
func (b *budgetsConfig) validate() error {
	var errs []error
	dur := func(key, v string, def time.Duration, dst *time.Duration) {
		if v == "" {
			*dst = def
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("config: budgets.%s must be a positive duration such as 30s, got %q", key, v))
			return
		}
		*dst = d
	}
	dur("read_header_timeout", b.ReadHeaderTimeout, defaultReadHeaderTimeout, &b.readHeader)
	dur("read_timeout", b.ReadTimeout, defaultReadTimeout, &b.read)
	dur("write_timeout", b.WriteTimeout, defaultWriteTimeout, &b.write)
	dur("idle_timeout", b.IdleTimeout, defaultIdleTimeout, &b.idle)
	if b.read > 0 && b.readHeader > b.read {
		errs = append(errs, fmt.Errorf("config: budgets.read_header_timeout (%s) must not be longer than budgets.read_timeout (%s)", b.readHeader, b.read))
	}
	count := func(key string, v *int, def int) {
		switch {
		case *v == 0:
			*v = def
		case *v < -1:
			errs = append(errs, fmt.Errorf("config: budgets.%s must be a positive number, or -1 for no limit, got %d", key, *v))
		}
	}
	count("max_connections", &b.MaxConnections, defaultMaxConnections)
	count("max_connections_per_address", &b.MaxConnectionsPerAddress, defaultMaxConnectionsPerAddress)
	for _, c := range []struct {
		key string
		v   int
	}{{"review_burst", b.ReviewBurst}, {"vote_burst", b.VoteBurst}, {"streams_per_principal", b.StreamsPerPrincipal},
		{"pending_per_agent", b.PendingPerAgent}, {"pending_per_tenant", b.PendingPerTenant}} {
		if c.v < -1 {
			errs = append(errs, fmt.Errorf("config: budgets.%s must be a positive number, or -1 for no limit, got %d", c.key, c.v))
		}
	}
	for _, c := range []struct {
		key string
		v   float64
	}{{"review_rate", b.ReviewRate}, {"vote_rate", b.VoteRate}} {
		if c.v < 0 && c.v != -1 {
			errs = append(errs, fmt.Errorf("config: budgets.%s must be requests per second (such as 20 or 0.5), or -1 for no limit, got %g", c.key, c.v))
		}
	}
	if b.ReviewRate >= 0 && b.ReviewBurst == -1 {
		errs = append(errs, errors.New("config: budgets.review_burst cannot be -1 while review_rate is on (turn review_rate off with -1)"))
	}
	if b.VoteRate >= 0 && b.VoteBurst == -1 {
		errs = append(errs, errors.New("config: budgets.vote_burst cannot be -1 while vote_rate is on (turn vote_rate off with -1)"))
	}
	return errors.Join(errs...)
}

// connectionLimit is MaxConnections kept below the process's file limit,
// so that the server refuses connections itself instead of failing to
// accept them (and with them, NATS reconnects and file writes).
func (b *budgetsConfig) connectionLimit(log *slog.Logger) int {
	limit := b.MaxConnections
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur <= fdReserve*2 {
		return limit
	}
	room := int(min(rl.Cur-fdReserve, 1<<30))
	if limit == -1 || limit > room {
		log.Warn("budgets.max_connections is above what the file limit allows; lowered", "max_connections", limit, "lowered_to", room, "file_limit", rl.Cur)
		return room
	}
	return limit
}

// httpServer is the HTTP server of serve with the budgets' timeouts:
// ReadTimeout bounds the request, and is lifted once its body is read
// (liftReadDeadline), so that it does not end long polls and event
// streams; the write timeout is applied to each write by the listener's
// connections (budgetListener).
func (b *budgetsConfig) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           liftReadDeadline(h),
		ReadHeaderTimeout: b.readHeader,
		ReadTimeout:       b.read,
		IdleTimeout:       b.idle,
	}
}

// liftReadDeadline clears the connection's read deadline once the
// request's body has been read (at once for a request without one). The
// server keeps reading the connection in the background while a handler
// runs, to notice the client leaving; with the read deadline left in place
// that read would time out and cancel a healthy long poll or event stream.
func liftReadDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		lift := func() { _ = rc.SetReadDeadline(time.Time{}) }
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			lift()
		} else {
			r.Body = &liftingBody{ReadCloser: r.Body, lift: lift}
		}
		next.ServeHTTP(w, r)
	})
}

// liftingBody lifts the read deadline when the body has been read to its
// end.
type liftingBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *liftingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// budgetListener bounds the connections open at once, overall and per
// remote address, and gives every write of an accepted connection a
// deadline. A connection over a bound is answered 429 with Retry-After and
// closed, before any of its request is read.
type budgetListener struct {
	net.Listener
	max, perAddress int // -1: no limit
	writeTimeout    time.Duration
	refused         *prometheus.CounterVec

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	// refusing bounds the goroutines that answer refused connections; past
	// it a refused connection is closed without an answer.
	refusing chan struct{}
	// released, when set (by tests, under mu), is told the address of
	// each place given back.
	released chan<- string
}

// maxRefusing is how many refused connections are answered at once.
const maxRefusing = 64

func newBudgetListener(ln net.Listener, maxConns, perAddress int, writeTimeout time.Duration, refused *prometheus.CounterVec) *budgetListener {
	return &budgetListener{Listener: ln, max: maxConns, perAddress: perAddress, writeTimeout: writeTimeout, refused: refused,
		byAddr: map[string]int{}, refusing: make(chan struct{}, maxRefusing)}
}

// Accept returns the next connection within the budgets, answering and
// closing those over them.
func (l *budgetListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteHost(c.RemoteAddr())
		l.mu.Lock()
		budget := ""
		switch {
		case l.max >= 0 && l.open >= l.max:
			budget = api.BudgetConnections
		case l.perAddress >= 0 && l.byAddr[addr] >= l.perAddress:
			budget = api.BudgetConnectionsPerAddress
		default:
			l.open++
			l.byAddr[addr]++
		}
		l.mu.Unlock()
		if budget == "" {
			return &budgetConn{Conn: c, l: l, addr: addr}, nil
		}
		l.refused.WithLabelValues(budget).Inc()
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refuseConn(c, budget)
			}()
		default:
			_ = c.Close()
		}
	}
}

func (l *budgetListener) release(addr string) {
	l.mu.Lock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	released := l.released
	l.mu.Unlock()
	if released != nil {
		released <- addr
	}
}

// remoteHost is the IP of a remote address (the whole address when it has
// no port).
func remoteHost(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// connRetryAfter is the Retry-After of a refused connection, in seconds.
const connRetryAfter = "2"

// refuseConn answers a connection over a budget with 429 and closes it.
// It reads at most the request's head (a few kilobytes, for a second) so
// that the answer comes after the request, as clients expect; the rest is
// drained for a moment, so that closing does not reset the connection
// under the answer.
func refuseConn(c net.Conn, budget string) {
	defer c.Close()
	body := fmt.Sprintf(`{"error":{"code":%q,"message":"the server holds its most connections (%s); retry later","retry_after":%s}}`+"\n", api.CodeTooManyConnections, budget, connRetryAfter)
	resp := "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: " + connRetryAfter +
		"\r\nConnection: close\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
	_ = c.SetDeadline(time.Now().Add(time.Second))
	head := bufio.NewReader(io.LimitReader(c, 16<<10))
	for {
		line, err := head.ReadSlice('\n')
		if err != nil || len(bytes.TrimSpace(line)) == 0 {
			break
		}
	}
	if _, err := io.WriteString(c, resp); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// budgetConn is an accepted connection within the budgets: each write
// must finish within the write timeout, and closing gives its place back.
type budgetConn struct {
	net.Conn
	l    *budgetListener
	addr string
	once sync.Once
}

func (c *budgetConn) Write(p []byte) (int, error) {
	if c.l.writeTimeout > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeTimeout))
	}
	return c.Conn.Write(p)
}

func (c *budgetConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

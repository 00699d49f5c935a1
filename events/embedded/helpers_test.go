package embedded_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

// denyTimeout bounds an operation that permissions must refuse: the refusal
// shows as an async permission violation and, for requests, a timeout.
const denyTimeout = 2 * time.Second

// opTimeout bounds an operation that must succeed.
const opTimeout = 10 * time.Second

// nonAdmin lists every role but admin.
var nonAdmin = []embedded.Role{
	embedded.RoleArbiter, embedded.RoleOrchestrator, embedded.RoleResolver,
	embedded.RoleAPI, embedded.RoleNotifier,
}

// env is an embedded server with one user per role, provisioned by admin.
type env struct {
	srv   *embedded.Server
	users map[embedded.Role]embedded.User
}

func newEnv(t *testing.T) *env {
	t.Helper()
	users := embedded.GenerateUsers(embedded.Roles...)
	srv, err := embedded.Start(embedded.Config{
		StoreDir: t.TempDir(),
		Port:     -1,
		Users:    users,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &env{srv: srv, users: map[embedded.Role]embedded.User{}}
	for _, u := range users {
		e.users[u.Role] = u
	}
	admin := e.connect(t, embedded.RoleAdmin)
	ctx := testContext(t, opTimeout)
	if err := events.Provision(ctx, admin.js, events.ProvisionConfig{}); err != nil {
		t.Fatalf("Provision as admin: %v", err)
	}
	return e
}

// client is one role's connection and the async errors it has seen.
type client struct {
	role embedded.Role
	nc   *nats.Conn
	js   jetstream.JetStream
	errs *asyncErrs
}

func (e *env) connect(t *testing.T, r embedded.Role) *client {
	t.Helper()
	return connectTo(t, e.srv, e.users[r])
}

func connectTo(t *testing.T, srv *embedded.Server, u embedded.User) *client {
	t.Helper()
	errs := newAsyncErrs()
	nc, err := srv.Connect(u, nats.ErrorHandler(errs.handler))
	if err != nil {
		t.Fatalf("Connect as %s: %v", u.Name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	return &client{role: u.Role, nc: nc, js: js, errs: errs}
}

// asyncErrs collects the async errors of one connection.
type asyncErrs struct {
	mu      sync.Mutex
	errs    []error
	changed chan struct{}
}

func newAsyncErrs() *asyncErrs { return &asyncErrs{changed: make(chan struct{}, 1)} }

func (a *asyncErrs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// take removes and returns the first permission violation that names
// subject, if there is one.
func (a *asyncErrs) take(subject string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, err := range a.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
			a.errs = append(a.errs[:i], a.errs[i+1:]...)
			return err
		}
	}
	return nil
}

func (a *asyncErrs) all() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// noErrors fails the test if the connection has reported any async error.
func (c *client) noErrors(t *testing.T) {
	t.Helper()
	if errs := c.errs.all(); len(errs) > 0 {
		t.Errorf("%s: unexpected async errors: %v", c.role, errs)
	}
}

// denied runs op, which the server must refuse with a permission violation
// on subject. op gets a context that ends once the violation has been reported, or
// after denyTimeout; op must fail.
func (c *client) denied(t *testing.T, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), denyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()

	var violation error
	timer := time.NewTimer(denyTimeout)
	defer timer.Stop()
wait:
	for {
		if violation = c.errs.take(subject); violation != nil {
			break
		}
		select {
		case <-c.errs.changed:
		case <-timer.C:
			break wait
		}
	}
	cancel()
	err := <-done
	if violation == nil {
		t.Errorf("%s: no permission violation for %q (async errors: %v; op error: %v)", c.role, subject, c.errs.all(), err)
	}
	if err == nil {
		t.Errorf("%s: operation on %q succeeded, want it refused", c.role, subject)
	}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

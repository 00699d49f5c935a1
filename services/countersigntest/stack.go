package countersigntest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
)

// Stack is Countersign's bus in one process, for examples and programs that
// have no *testing.T: an embedded NATS server with production's user per
// role (no TCP listener), the streams and buckets, and an arbiter that
// trusts the stack's policy. Connect as a role to run a gate, an API or a
// resolver on it; Close stops everything.
type Stack struct {
	// Policy is the policy the arbiter trusts (parsed from StartStack's).
	Policy *policy.Policy

	srv     *embedded.Server
	dir     string
	users   map[embedded.Role]embedded.User
	refused *violationLog
	cancel  context.CancelFunc
	arbDone chan struct{}

	mu    sync.Mutex
	conns []*nats.Conn
}

// StackOption configures StartStack.
type StackOption func(*stackOptions)

type stackOptions struct {
	clock *Clock
}

// WithClock runs the stack's arbiter on clock and attaches clock to the
// stack's server (as its admin user), so that clock.Advance fires the
// stack's timers. Components connected to the stack take clock.Now too.
func WithClock(clock *Clock) StackOption {
	return func(o *stackOptions) { o.clock = clock }
}

// StartStack starts a Stack whose arbiter trusts the policy in policyYAML.
func StartStack(policyYAML string, opts ...StackOption) (*Stack, error) {
	var o stackOptions
	for _, opt := range opts {
		opt(&o)
	}
	pol, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "countersign-stack")
	if err != nil {
		return nil, err
	}
	s := &Stack{Policy: pol, dir: dir, users: map[embedded.Role]embedded.User{}, refused: &violationLog{}, arbDone: make(chan struct{})}
	list := embedded.GenerateUsers(embedded.Roles...)
	for _, u := range list {
		s.users[u.Role] = u
	}
	s.srv, err = embedded.Start(embedded.Config{StoreDir: dir, NoListen: true, Users: list,
		Logger: slog.New(slog.NewTextHandler(s.refused, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	fail := func(err error) (*Stack, error) {
		close(s.arbDone)
		s.Close()
		return nil, err
	}
	admin, err := s.JetStream(embedded.RoleAdmin)
	if err != nil {
		return fail(err)
	}
	if err := events.Provision(ctx, admin, events.ProvisionConfig{}); err != nil {
		return fail(err)
	}
	arbJS, err := s.JetStream(embedded.RoleArbiter)
	if err != nil {
		return fail(err)
	}
	acfg := arbiter.Config{JS: arbJS, Policies: arbiter.Policies{pol}}
	if o.clock != nil {
		acfg.Now = o.clock.Now
		o.clock.Attach(admin)
	}
	arb, err := arbiter.New(ctx, acfg)
	if err != nil {
		return fail(err)
	}
	go func() { defer close(s.arbDone); _ = arb.Run(ctx) }()
	return s, nil
}

// JetStream connects as role's user, with exactly production's grants.
func (s *Stack) JetStream(role embedded.Role) (jetstream.JetStream, error) {
	nc, err := s.srv.Connect(s.users[role])
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return jetstream.New(nc)
}

// OnPending calls fn, on a goroutine of its own, once for each approval
// that is pending from now on until ctx ends (a human's part in an example:
// fn decides it). The returned func waits for the watch to end.
func (s *Stack) OnPending(ctx context.Context, fn func(eventID string)) (wait func(), err error) {
	js, err := s.JetStream(embedded.RoleResolver)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		seen := map[string]bool{}
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-ctx.Done():
				return
			case e = <-w.Updates():
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut || seen[e.Key()] {
				continue
			}
			var rec contracts.Record
			if contracts.Decode(e.Value(), &rec) != nil || rec.Status != contracts.StatusPending {
				continue
			}
			seen[e.Key()] = true
			fn(e.Key())
		}
	}()
	return func() { <-done }, nil
}

// Close stops the arbiter, the connections and the server, and returns an
// error naming every permission the server refused a role meanwhile (a
// role that needs a subject its grants lack).
func (s *Stack) Close() error {
	s.cancel()
	<-s.arbDone
	s.mu.Lock()
	for _, nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.srv.Shutdown()
	_ = os.RemoveAll(s.dir)
	if bad := s.refused.lines(); len(bad) > 0 {
		return errors.New("the NATS server refused a role: " + strings.Join(bad, "; "))
	}
	return nil
}

// violationLog keeps the permission violations the server logs. Clients
// delete the ordered consumers of their watches where their role may not;
// the server expires those itself, so those refusals are left out.
type violationLog struct {
	mu  sync.Mutex
	bad []string
}

func (l *violationLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	if strings.Contains(line, "Violation") && !strings.Contains(line, "$JS.API.CONSUMER.DELETE.") {
		l.mu.Lock()
		l.bad = append(l.bad, line)
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *violationLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

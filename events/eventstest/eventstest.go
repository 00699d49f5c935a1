// Package eventstest runs a real, embedded nats-server with JetStream for
// tests: random port, a temporary store directory, shut down at the end of
// the test. It can be restarted on the same port and store to test
// durability and reconnects.
//
// The server has the same users and permissions as production: one user per
// Countersign role (embedded.Permissions), so a component under test
// connects with ConnectAs or JetStreamAs and is granted exactly what `serve`
// and deploy/ grant its role. Connect and JetStream connect as admin, for
// provisioning and for a test's own inspection. Any permission violation the
// server logs fails the test at its end (AllowViolations opts out, for tests
// that provoke them), so a role that needs a subject its grants lack is
// caught by the test that exercises it.
package eventstest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

// Server is an embedded JetStream server owned by one test.
type Server struct {
	tb    testing.TB
	opts  server.Options
	ns    *server.Server
	store string
	users map[embedded.Role]embedded.User
	log   *violations
}

// Option changes the server before it starts.
type Option func(*settings)

type settings struct {
	opts            server.Options
	allowViolations bool
}

// SyncAlways makes the server fsync every write, as production does.
func SyncAlways() Option { return func(s *settings) { s.opts.SyncAlways = true } }

// AllowViolations lets the test end well although the server logged
// permission violations: for tests that check a role is refused something.
func AllowViolations() Option { return func(s *settings) { s.allowViolations = true } }

// ServerOptions changes the nats-server options directly.
func ServerOptions(f func(*server.Options)) Option { return func(s *settings) { f(&s.opts) } }

// NewServer starts a server on a random loopback port with its store in a
// temporary directory.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	store := tb.TempDir()
	set := settings{opts: server.Options{
		ServerName: "countersign-test",
		Host:       "127.0.0.1",
		Port:       freePort(tb),
		JetStream:  true,
		StoreDir:   store,
		NoLog:      true,
		NoSigs:     true,
	}}
	users := map[embedded.Role]embedded.User{}
	for _, u := range embedded.GenerateUsers(embedded.Roles...) {
		users[u.Role] = u
		set.opts.Users = append(set.opts.Users, &server.User{
			Username: u.Name, Password: u.Password, Permissions: embedded.Permissions(u.Role),
		})
	}
	for _, f := range opts {
		f(&set)
	}
	s := &Server{tb: tb, opts: set.opts, store: store, users: users, log: &violations{}}
	s.start()
	tb.Cleanup(func() {
		s.Shutdown()
		if bad := s.log.refused(); len(bad) > 0 && !set.allowViolations {
			tb.Errorf("eventstest: the NATS server refused a role something it asked for (fix the role's grants in events/embedded/roles.go and deploy/):\n  %s",
				strings.Join(bad, "\n  "))
		}
	})
	return s
}

// violations records the permission violations the server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) logf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	if !strings.Contains(line, "Violation") {
		return
	}
	v.mu.Lock()
	v.lines = append(v.lines, line)
	v.mu.Unlock()
}

// refused returns the violations that matter. Clients delete the ordered
// consumers (watches, timeline reads) they are done with where their role
// may not delete consumers of a shared stream; the server expires those on
// its own, so such refusals are harmless by design.
func (v *violations) refused() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, l := range v.lines {
		if strings.Contains(l, "$JS.API.CONSUMER.DELETE.") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// Violations returns every permission violation the server logged so far,
// harmless consumer deletions included.
func (s *Server) Violations() []string {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return append([]string(nil), s.log.lines...)
}

func (v *violations) Noticef(format string, a ...any) { v.logf(format, a...) }
func (v *violations) Warnf(format string, a ...any)   { v.logf(format, a...) }
func (v *violations) Fatalf(format string, a ...any)  { v.logf(format, a...) }
func (v *violations) Errorf(format string, a ...any)  { v.logf(format, a...) }
func (v *violations) Debugf(format string, a ...any)  {}
func (v *violations) Tracef(format string, a ...any)  {}

func freePort(tb testing.TB) int {
	p, err := embedded.FreePort()
	if err != nil {
		tb.Fatalf("eventstest: free port: %v", err)
	}
	return p
}

func (s *Server) start() {
	s.tb.Helper()
	o := s.opts
	ns, err := server.NewServer(&o)
	if err != nil {
		s.tb.Fatalf("eventstest: new server: %v", err)
	}
	ns.SetLogger(s.log, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		s.tb.Fatalf("eventstest: server not ready")
	}
	s.ns = ns
}

// URL is the client URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// NATS is the running server.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server (idempotent).
func (s *Server) Shutdown() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	}
}

// Restart stops the server and starts it again on the same port and store.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Shutdown()
	s.start()
}

// Start starts a stopped server again on the same port and store.
func (s *Server) Start() {
	s.tb.Helper()
	if s.ns == nil {
		s.start()
	}
}

// Connect opens an admin connection that reconnects forever and is closed
// at the end of the test: for provisioning and inspection, never for a
// component under test (use ConnectAs).
func (s *Server) Connect(opts ...nats.Option) *nats.Conn {
	s.tb.Helper()
	return s.ConnectAs(embedded.RoleAdmin, opts...)
}

// ConnectAs opens a connection as role's user, with exactly the
// permissions production gives that role.
func (s *Server) ConnectAs(role embedded.Role, opts ...nats.Option) *nats.Conn {
	s.tb.Helper()
	u, ok := s.users[role]
	if !ok {
		s.tb.Fatalf("eventstest: no user for role %q", role)
	}
	base := []nats.Option{
		nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.UserInfo(u.Name, u.Password), nats.Name("countersign-test-" + string(role)), embedded.InboxOption(role),
	}
	nc, err := nats.Connect(s.URL(), append(base, opts...)...)
	if err != nil {
		s.tb.Fatalf("eventstest: connect as %s: %v", role, err)
	}
	s.tb.Cleanup(nc.Close)
	return nc
}

// User returns the NATS user of role (to start a process as that role).
func (s *Server) User(role embedded.Role) embedded.User { return s.users[role] }

// JetStream connects as admin and returns a JetStream context.
func (s *Server) JetStream(opts ...nats.Option) jetstream.JetStream {
	s.tb.Helper()
	return s.JetStreamAs(embedded.RoleAdmin, opts...)
}

// JetStreamAs connects as role's user and returns a JetStream context.
func (s *Server) JetStreamAs(role embedded.Role, opts ...nats.Option) jetstream.JetStream {
	s.tb.Helper()
	js, err := jetstream.New(s.ConnectAs(role, opts...))
	if err != nil {
		s.tb.Fatalf("eventstest: jetstream: %v", err)
	}
	return js
}

// Provision creates the contract's streams and buckets.
func (s *Server) Provision(js jetstream.JetStream) {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		s.tb.Fatalf("eventstest: provision: %v", fmt.Errorf("%w", err))
	}
}

// EarlierBucket configures the provisioned bucket as releases before one
// value a key provisioned it: the last history values of each key kept
// (hitl_policy 64, hitl_passkeys 16, hitl_push 4), plain writes taken on a
// key that holds one. For tests of what this release does with a bucket
// such a release wrote.
func EarlierBucket(tb testing.TB, js jetstream.JetStream, bucket string, history int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		tb.Fatalf("eventstest: bucket %s: %v", bucket, err)
	}
	sc := st.CachedInfo().Config
	sc.MaxMsgsPerSubject, sc.DiscardNewPerSubject = history, false
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		tb.Fatalf("eventstest: configure bucket %s as an earlier release did: %v", bucket, err)
	}
}

// AnswerOn has the server publish its answer to a JetStream request of
// role's credential on subject, by naming subject as the request's reply
// (what an attacker holding that credential can do), and returns once the
// answer is published: a subscriber of subject has it. A stream whose
// subjects take subject has it queued then, ahead of any later write. It
// reports false when role may make no JetStream request.
func (s *Server) AnswerOn(role embedded.Role, subject string) bool {
	s.tb.Helper()
	var request string
	for _, p := range embedded.Permissions(role).Publish.Allow {
		if strings.HasPrefix(p, "$JS.API.") && !strings.ContainsAny(p, "*>") {
			request = p
			break
		}
	}
	if request == "" {
		return false
	}
	admin := s.Connect()
	seen, err := admin.SubscribeSync(subject)
	if err != nil {
		s.tb.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		s.tb.Fatal(err)
	}
	if err := s.ConnectAs(role).PublishRequest(request, subject, nil); err != nil {
		s.tb.Fatal(err)
	}
	if _, err := seen.NextMsg(10 * time.Second); err != nil {
		s.tb.Fatalf("eventstest: %s: no answer published on %s: %v", role, subject, err)
	}
	return true
}

// StoreAnswerOn has the server store its answer to a JetStream request of
// role's credential under key of bucket (AnswerOn, on the key's subject)
// and returns once it is the key's newest value: for a key that holds
// nothing yet, or a bucket that keeps a key's history.
func (s *Server) StoreAnswerOn(role embedded.Role, bucket, key string) {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := s.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		s.tb.Fatal(err)
	}
	w, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		s.tb.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	if !s.AnswerOn(role, "$KV."+bucket+"."+key) {
		s.tb.Fatalf("eventstest: %s makes no JetStream request", role)
	}
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				return
			}
		case <-ctx.Done():
			s.tb.Fatalf("eventstest: the answer was not stored under %s in %s", key, bucket)
		}
	}
}

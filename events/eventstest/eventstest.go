// Package eventstest runs a real, embedded nats-server with JetStream for
// tests: random port, a temporary store directory, shut down at the end of
// the test. It can be restarted on the same port and store to test
// durability and reconnects.
package eventstest

import (
	"context"
	"fmt"
	"strconv"
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
}

// Option changes the server's options before it starts.
type Option func(*server.Options)

// SyncAlways makes the server fsync every write, as production does.
func SyncAlways() Option { return func(o *server.Options) { o.SyncAlways = true } }

// NewServer starts a server on a random loopback port with its store in a
// temporary directory.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	store := tb.TempDir()
	o := server.Options{
		ServerName: "countersign-test",
		Host:       "127.0.0.1",
		Port:       freePort(tb),
		JetStream:  true,
		StoreDir:   store,
		NoLog:      true,
		NoSigs:     true,
	}
	for _, f := range opts {
		f(&o)
	}
	s := &Server{tb: tb, opts: o, store: store}
	s.start()
	tb.Cleanup(s.Shutdown)
	return s
}

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

// Connect opens a client connection that reconnects forever and is closed
// at the end of the test.
func (s *Server) Connect(opts ...nats.Option) *nats.Conn {
	s.tb.Helper()
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	nc, err := nats.Connect(s.URL(), append(base, opts...)...)
	if err != nil {
		s.tb.Fatalf("eventstest: connect: %v", err)
	}
	s.tb.Cleanup(nc.Close)
	return nc
}

// JetStream connects and returns a JetStream context.
func (s *Server) JetStream(opts ...nats.Option) jetstream.JetStream {
	s.tb.Helper()
	js, err := jetstream.New(s.Connect(opts...))
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

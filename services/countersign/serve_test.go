package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

// A role run with a NATS user that may not play it fails at once, naming
// what the server refused, instead of hanging or failing vaguely.
func TestServeNamesTheRefusedPermission(t *testing.T) {
	users := embedded.GenerateUsers(embedded.RoleAdmin, embedded.RoleResolver)
	srv, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Port: -1, Users: users, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	admin, err := srv.Connect(users[0])
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}

	// The resolver user (it may vote and read records) runs the arbiter.
	fc := defaultConfig()
	fc.Data = t.TempDir()
	fc.Roles = []string{roleArbiter}
	fc.NATS.URL = srv.ClientURL()
	fc.NATS.User, fc.NATS.Password = users[1].Name, users[1].Password
	cfg := serveConfig{fileConfig: fc}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	err = serve(ctx, cfg, slog.New(slog.DiscardHandler), out)
	if err == nil {
		t.Fatal("serve ran the arbiter with the resolver's user")
	}
	msg := err.Error()
	if !strings.Contains(msg, "Permissions Violation") || !strings.Contains(msg, "$JS.API.CONSUMER") || !strings.Contains(msg, "arbiter") {
		t.Errorf("error does not name the refused permission: %v", err)
	}
}

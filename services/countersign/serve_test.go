package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/services/arbiter"
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
	cfg := arbiterAs(t, srv.ClientURL(), users[1])
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

// Against an external server, an admin provisions once and each role runs
// as its own user; a role without the API still answers health checks.
func TestServeRoleWithItsOwnUserAfterProvision(t *testing.T) {
	users := embedded.GenerateUsers(embedded.RoleAdmin, embedded.RoleArbiter)
	srv, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Port: -1, Users: users, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	t.Setenv("COUNTERSIGN_NATS_PASSWORD", users[0].Password)
	var said strings.Builder
	if err := cmdProvision([]string{"--nats-url", srv.ClientURL(), "--user", "admin"}, &said); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if !strings.Contains(said.String(), "provisioned with 1 replica") {
		t.Errorf("provision said %q", said.String())
	}

	cfg := arbiterAs(t, srv.ClientURL(), users[1])
	health, _ := serveInProcess(t, cfg, "Health:")
	health = strings.TrimSuffix(health, ",")
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(strings.TrimSuffix(health, "/healthz") + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "countersign_requests_created_total") {
			t.Errorf("metrics lack the arbiter's counters")
		}
	}
}

func TestRedactURLs(t *testing.T) {
	got := redactURLs("nats://arbiter:s3cret@n1:4222,nats://n2:4222")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "arbiter:xxxxx@n1:4222") || !strings.Contains(got, "nats://n2:4222") {
		t.Errorf("redactURLs = %q", got)
	}
}

// arbiterAs is the configuration of a serve process that runs only the
// arbiter, against the server at url, as user.
func arbiterAs(t *testing.T, url string, user embedded.User) serveConfig {
	t.Helper()
	fc := defaultConfig()
	fc.Data, fc.Addr = t.TempDir(), "127.0.0.1:0"
	fc.Roles = []string{roleArbiter}
	fc.NATS.URL = url
	fc.NATS.User, fc.NATS.Password = user.Name, user.Password
	cfg := serveConfig{fileConfig: fc}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A permission the server refuses while serving degrades only the request
// path that needed it: that path answers 503 with a code, the refusal is
// counted, and the process keeps serving everything else. (The API role
// once lacked the live feed's grant on HITL_REQUESTS, and opening the inbox
// made the whole server exit.)
func TestServeDegradesWhenARequestPathIsRefused(t *testing.T) {
	// The api user without the live feed's grants on the request stream.
	srv := eventstest.NewServer(t, eventstest.AllowViolations(), eventstest.ServerOptions(func(o *natsserver.Options) {
		for _, u := range o.Users {
			if u.Username != string(embedded.RoleAPI) {
				continue
			}
			var keep []string
			for _, s := range u.Permissions.Publish.Allow {
				if !strings.Contains(s, contracts.StreamRequests) {
					keep = append(keep, s)
				}
			}
			u.Permissions.Publish.Allow = keep
		}
	}))
	srv.Provision(srv.JetStream())
	api := srv.User(embedded.RoleAPI)
	fc := defaultConfig()
	fc.Data, fc.Addr = t.TempDir(), "127.0.0.1:0"
	fc.Roles = []string{roleAPI}
	fc.NATS.URL = srv.URL()
	fc.NATS.User, fc.NATS.Password = api.Name, api.Password
	cfg := serveConfig{fileConfig: fc}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	base, done := serveInProcess(t, cfg, "API:")
	base = strings.TrimSuffix(base, "/v1")
	tok, err := os.ReadFile(filepath.Join(cfg.Data, fileDevToken))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/v1/events")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
		t.Fatalf("GET /v1/events with the feed refused: %d %s; want 503 unavailable", code, body)
	}
	select {
	case <-done:
		t.Fatal("serve exited after a refused request path")
	default:
	}
	if code, body := get("/v1/approvals"); code != http.StatusOK {
		t.Errorf("GET /v1/approvals after the refusal: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `countersign_nats_permission_denied_total{connection="countersign"}`) {
		t.Errorf("the refusal is not counted in /metrics (%d)", code)
	}
}

// serveInProcess runs serve with cfg in this process until the test ends
// (an error it returns then fails the test) and returns the first word
// after label in what it prints, e.g. the address after "API:", and a
// channel closed if serve returns.
func serveInProcess(t *testing.T, cfg serveConfig, label string) (string, <-chan struct{}) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var serveErr error
	go func() {
		serveErr = serve(ctx, cfg, slog.New(slog.DiscardHandler), w)
		w.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		if serveErr != nil {
			t.Errorf("serve: %v", serveErr)
		}
	})
	sc := bufio.NewScanner(r)
	word := ""
	for word == "" && sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), label); ok {
			word = strings.Fields(rest)[0]
		}
	}
	if word == "" {
		t.Fatalf("serve printed no %s line", label)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return word, exited
}

// The grants that keep each role off the others' durables name exactly the
// durable consumers the arbiter and the notifier run.
func TestProtectedDurablesAreTheRolesDurables(t *testing.T) {
	want := []embedded.Durable{
		{Stream: contracts.StreamRequests, Name: arbiter.DurableRequests, Owner: embedded.RoleArbiter},
		{Stream: contracts.StreamResolutions, Name: arbiter.DurableResolutions, Owner: embedded.RoleArbiter},
		{Stream: contracts.StreamTimers, Name: arbiter.DurableTimers, Owner: embedded.RoleArbiter},
		{Stream: contracts.StreamEvents, Name: arbiter.DurableGrantUses, Owner: embedded.RoleArbiter},
		{Stream: contracts.StreamRequests, Name: dispatch.DurableRequests, Owner: embedded.RoleNotifier},
		{Stream: contracts.StreamEvents, Name: dispatch.DurableDecided, Owner: embedded.RoleNotifier},
		{Stream: contracts.StreamEvents, Name: dispatch.DurableChanges, Owner: embedded.RoleNotifier},
	}
	if !slices.Equal(embedded.Durables, want) {
		t.Errorf("embedded.Durables = %v, the roles' durables are %v", embedded.Durables, want)
	}
}

// With its embedded store syncing every write (the default), serve runs
// with the processors embedded.SyncWriteProcs gives, and puts the
// process's own number back when it stops.
func TestServeRaisesProcsForItsSyncingStore(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	before := runtime.GOMAXPROCS(0)
	// Registered first, so it runs after serveInProcess has stopped serve.
	t.Cleanup(func() {
		if got := runtime.GOMAXPROCS(0); got != before {
			t.Errorf("GOMAXPROCS after serve stopped = %d, want %d back", got, before)
		}
	})
	fc := defaultConfig()
	fc.Data, fc.Addr = t.TempDir(), "127.0.0.1:0"
	fc.Roles = []string{roleArbiter}
	fc.NATS.Listen = "off"
	if fc.NATS.Sync != "always" {
		t.Fatalf("default sync is %q, want always", fc.NATS.Sync)
	}
	cfg := serveConfig{fileConfig: fc}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	serveInProcess(t, cfg, "Health:")
	if got, want := runtime.GOMAXPROCS(0), embedded.SyncWriteProcs(before); got != want {
		t.Errorf("GOMAXPROCS while serving = %d, want %d", got, want)
	}
}

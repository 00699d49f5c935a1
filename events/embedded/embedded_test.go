package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

func TestStartConnectShutdown(t *testing.T) {
	logs := &syncBuffer{}
	srv, err := embedded.Start(embedded.Config{
		StoreDir:   t.TempDir(),
		Port:       -1,
		ServerName: "cs-test",
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Shutdown)

	if got := srv.NATS().Name(); got != "cs-test" {
		t.Errorf("server name = %q, want cs-test", got)
	}
	url := srv.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Errorf("ClientURL = %q, want nats://127.0.0.1:<port>", url)
	}
	if !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "component=nats-server") {
		t.Errorf("server logs not forwarded at debug level; got:\n%s", logs.String())
	}

	// In process, without users: no authentication.
	c := connectTo(t, srv, embedded.User{})
	ctx := testContext(t, opTimeout)
	if err := events.Provision(ctx, c.js, events.ProvisionConfig{}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if _, err := c.js.Publish(ctx, contracts.ToolRequestedSubject("a"), []byte(`{}`)); err != nil {
		t.Fatalf("publish in process: %v", err)
	}

	// Over TCP.
	tcp, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect over TCP: %v", err)
	}
	defer tcp.Close()
	tjs, err := jetstream.New(tcp)
	if err != nil {
		t.Fatal(err)
	}
	info, err := tjs.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatalf("stream info over TCP: %v", err)
	}
	if info.CachedInfo().State.Msgs != 1 {
		t.Errorf("HITL_REQUESTS holds %d messages, want 1", info.CachedInfo().State.Msgs)
	}

	srv.Shutdown()
	srv.Shutdown() // idempotent
	if srv.NATS().Running() {
		t.Error("server still running after Shutdown")
	}
	c.noErrors(t)
}

func TestNoListen(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	if url := srv.ClientURL(); url != "" {
		t.Errorf("ClientURL = %q, want empty without a listener", url)
	}
	c := connectTo(t, srv, embedded.User{})
	ctx := testContext(t, opTimeout)
	if _, err := c.js.AccountInfo(ctx); err != nil {
		t.Fatalf("account info in process: %v", err)
	}
}

func TestRestartKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	users := embedded.GenerateUsers(embedded.RoleAdmin, embedded.RoleOrchestrator)
	cfg := embedded.Config{StoreDir: dir, Port: -1, SyncAlways: true, Users: users}

	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	admin := connectTo(t, srv, users[0])
	ctx := testContext(t, opTimeout)
	if err := events.Provision(ctx, admin.js, events.ProvisionConfig{}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	orch := connectTo(t, srv, users[1])
	for i := range 3 {
		subj := contracts.ToolRequestedSubject("agent-" + strconv.Itoa(i))
		if _, err := orch.js.Publish(ctx, subj, []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	orch.noErrors(t)
	srv.Shutdown()

	srv2, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(srv2.Shutdown)
	admin2 := connectTo(t, srv2, users[0])
	stream, err := admin2.js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := stream.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("HITL_REQUESTS holds %d messages after restart, want 3", n)
	}
	msg, err := stream.GetMsg(ctx, 2)
	if err != nil {
		t.Fatalf("get message 2: %v", err)
	}
	if string(msg.Data) != `{"n":1}` || msg.Subject != contracts.ToolRequestedSubject("agent-1") {
		t.Errorf("message 2 = %s %s, want %s {\"n\":1}", msg.Subject, msg.Data, contracts.ToolRequestedSubject("agent-1"))
	}
}

func TestStartErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  embedded.Config
		want string
	}{
		{"no store dir", embedded.Config{Port: -1}, "StoreDir is required"},
		{"unknown role", embedded.Config{StoreDir: t.TempDir(), Port: -1,
			Users: []embedded.User{{Name: "x", Password: "p", Role: "root"}}}, `unknown role "root"`},
		{"duplicate user", embedded.Config{StoreDir: t.TempDir(), Port: -1,
			Users: []embedded.User{{Name: "x", Password: "p", Role: embedded.RoleAPI}, {Name: "x", Password: "q", Role: embedded.RoleAPI}}}, `duplicate user "x"`},
		{"empty password", embedded.Config{StoreDir: t.TempDir(), Port: -1,
			Users: []embedded.User{{Name: "x", Role: embedded.RoleAPI}}}, "password is required"},
		{"bad port", embedded.Config{StoreDir: t.TempDir(), Port: 70000}, "Config.Port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := embedded.Start(tc.cfg)
			if err == nil {
				srv.Shutdown()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}

	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		srv, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Port: port})
		if err == nil {
			srv.Shutdown()
			t.Fatal("Start on a busy port succeeded")
		}
		if !strings.Contains(err.Error(), "failed to start") || !strings.Contains(err.Error(), strconv.Itoa(port)) {
			t.Errorf("error %q should say the server failed to start on port %d", err, port)
		}
	})
}

func TestAuthenticationRequired(t *testing.T) {
	e := newEnv(t)
	// No credentials over TCP.
	if nc, err := nats.Connect(e.srv.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("connected over TCP without credentials")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("connect without credentials: %v, want an authorization error", err)
	}
	// A wrong password in process.
	u := e.users[embedded.RoleResolver]
	u.Password = "wrong"
	if nc, err := e.srv.Connect(u); err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	} else if !errors.Is(err, embedded.ErrAuthentication) || !strings.Contains(err.Error(), `"resolver"`) {
		t.Errorf("error %q should be ErrAuthentication and name the user", err)
	}
	// Each role's own credentials work over TCP too.
	r := e.users[embedded.RoleResolver]
	nc, err := nats.Connect(e.srv.ClientURL(), nats.UserInfo(r.Name, r.Password), embedded.InboxOptionFor(r.Name))
	if err != nil {
		t.Fatalf("resolver over TCP: %v", err)
	}
	nc.Close()
}

// The ErrorHandler of Connect logs async errors to the Logger and still
// calls the caller's own handler.
func TestConnectLogsAsyncErrors(t *testing.T) {
	logs := &syncBuffer{}
	users := embedded.GenerateUsers(embedded.RoleResolver)
	srv, err := embedded.Start(embedded.Config{
		StoreDir: t.TempDir(), NoListen: true, Users: users,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), // info and above: only async errors
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	c := connectTo(t, srv, users[0])
	subject := "$KV." + contracts.BucketApprovals + ".forged"
	c.denied(t, subject, func(ctx context.Context) error {
		if err := c.nc.Publish(subject, []byte("x")); err != nil {
			return err
		}
		if err := c.nc.FlushWithContext(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	out := logs.String()
	if !strings.Contains(out, "nats async error") || !strings.Contains(out, "user=resolver") ||
		!strings.Contains(out, subject) {
		t.Errorf("async permission violation not logged; log:\n%s", out)
	}
	if strings.Contains(out, "component=nats-server") {
		t.Errorf("server logs should be at debug level only; log:\n%s", out)
	}
}

func TestGenerateUsers(t *testing.T) {
	users := embedded.GenerateUsers(embedded.Roles...)
	if len(users) != len(embedded.Roles) {
		t.Fatalf("got %d users, want %d", len(users), len(embedded.Roles))
	}
	seen := map[string]bool{}
	for i, u := range users {
		if u.Role != embedded.Roles[i] || u.Name != string(u.Role) {
			t.Errorf("user %d = %q role %q, want name and role %q", i, u.Name, u.Role, embedded.Roles[i])
		}
		if len(u.Password) != 43 { // 32 bytes, base64url without padding
			t.Errorf("%s: password length %d, want 43", u.Name, len(u.Password))
		}
		if strings.ContainsAny(u.Password, "+/=") {
			t.Errorf("%s: password %q is not base64url", u.Name, u.Password)
		}
		if seen[u.Password] {
			t.Errorf("%s: password repeated", u.Name)
		}
		seen[u.Password] = true
	}
}

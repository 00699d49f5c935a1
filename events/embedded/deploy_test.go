package embedded_test

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

const deployConf = "../../deploy/nats-server.conf"

func passwordEnv(r embedded.Role) string {
	return "COUNTERSIGN_" + strings.ToUpper(string(r)) + "_PASSWORD"
}

// loadDeployConf sets a generated password for every role in the
// environment and loads deploy/nats-server.conf.
func loadDeployConf(t *testing.T) (*server.Options, map[embedded.Role]embedded.User) {
	t.Helper()
	users := map[embedded.Role]embedded.User{}
	for _, u := range embedded.GenerateUsers(embedded.Roles...) {
		// nats-server parses a variable's value as a config value: a
		// password must start with a letter to be read as a plain string
		// (one starting with digits can parse as a number or a date).
		// deploy/README.md generates them this way.
		u.Password = "cs_" + u.Password
		t.Setenv(passwordEnv(u.Role), u.Password)
		users[u.Role] = u
	}
	opts, err := server.ProcessConfigFile(deployConf)
	if err != nil {
		t.Fatalf("load %s: %v", deployConf, err)
	}
	return opts, users
}

func TestDeployConfMatchesPermissions(t *testing.T) {
	opts, users := loadDeployConf(t)
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("jetstream %v, sync always %v; want both", opts.JetStream, opts.SyncAlways)
	}
	if len(opts.Users) != len(embedded.Roles) {
		t.Fatalf("config has %d users, want one per role (%d)", len(opts.Users), len(embedded.Roles))
	}
	for _, u := range opts.Users {
		r := embedded.Role(u.Username)
		if !r.Valid() {
			t.Errorf("config user %q is not a role", u.Username)
			continue
		}
		if u.Password != users[r].Password {
			t.Errorf("%s: password not taken from %s", r, passwordEnv(r))
		}
		if u.Account == nil || u.Account.Name != "COUNTERSIGN" {
			t.Errorf("%s: account %v, want COUNTERSIGN", r, u.Account)
		}
		want := embedded.Permissions(r)
		if u.Permissions == nil {
			t.Errorf("%s: no permissions in the config", r)
			continue
		}
		compare := func(what string, got, want *server.SubjectPermission) {
			var g, w server.SubjectPermission
			if got != nil {
				g = *got
			}
			if want != nil {
				w = *want
			}
			for _, pair := range [][2][]string{{g.Allow, w.Allow}, {g.Deny, w.Deny}} {
				a, b := slices.Sorted(slices.Values(pair[0])), slices.Sorted(slices.Values(pair[1]))
				if !slices.Equal(a, b) {
					t.Errorf("%s %s: config has\n  %q\nPermissions has\n  %q", r, what, a, b)
				}
			}
		}
		compare("publish", u.Permissions.Publish, want.Publish)
		compare("subscribe", u.Permissions.Subscribe, want.Subscribe)
		if !reflect.DeepEqual(u.Permissions.Response, want.Response) {
			t.Errorf("%s: allow_responses %+v, Permissions has %+v", r, u.Permissions.Response, want.Response)
		}
	}
}

func TestDeployConfRequiresPasswords(t *testing.T) {
	for _, r := range embedded.Roles {
		t.Setenv(passwordEnv(r), "set")
	}
	os.Unsetenv(passwordEnv(embedded.RoleResolver)) // restored by t.Setenv
	if _, err := server.ProcessConfigFile(deployConf); err == nil {
		t.Fatal("config loaded without COUNTERSIGN_RESOLVER_PASSWORD")
	} else if !strings.Contains(err.Error(), passwordEnv(embedded.RoleResolver)) {
		t.Errorf("error %q should name the missing variable", err)
	}
}

func TestDeployConfEnforcesRoles(t *testing.T) {
	opts, users := loadDeployConf(t)
	opts.StoreDir = t.TempDir()
	opts.Host = "127.0.0.1"
	opts.Port = -1
	opts.NoLog = true
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("server from %s: %v", deployConf, err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}

	connect := func(r embedded.Role) *client {
		t.Helper()
		errs := newAsyncErrs()
		u := users[r]
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(u.Name, u.Password), embedded.InboxOptionFor(u.Name), nats.ErrorHandler(errs.handler))
		if err != nil {
			t.Fatalf("connect as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return &client{role: r, nc: nc, js: js, errs: errs}
	}

	ctx := testContext(t, opTimeout)
	admin := connect(embedded.RoleAdmin)
	if err := events.Provision(ctx, admin.js, events.ProvisionConfig{}); err != nil {
		t.Fatalf("Provision as admin: %v", err)
	}

	arb := connect(embedded.RoleArbiter)
	kv, err := arb.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "x", []byte(`{"status":"pending"}`)); err != nil {
		t.Fatalf("arbiter: Create: %v", err)
	}
	arb.noErrors(t)

	res := connect(embedded.RoleResolver)
	if _, err := res.js.Publish(ctx, contracts.ResolvedSubject("x"), []byte(`{}`)); err != nil {
		t.Fatalf("resolver: publish vote: %v", err)
	}
	if entry, err := kv.Get(ctx, "x"); err != nil || entry.Revision() != 1 {
		t.Fatalf("arbiter: get: %v %v", entry, err)
	}
	res.noErrors(t)
	res.denied(t, approvalsWrite+"x", func(ctx context.Context) error {
		_, err := res.js.Publish(ctx, approvalsWrite+"x", []byte(`{"status":"approved"}`))
		return err
	})
	rkv, err := res.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	res.denied(t, approvalsWrite+"x", func(ctx context.Context) error {
		_, err := rkv.Update(ctx, "x", []byte(`{"status":"approved"}`), 1)
		return err
	})
	if entry, err := rkv.Get(ctx, "x"); err != nil || string(entry.Value()) != `{"status":"pending"}` {
		t.Fatalf("record after the resolver's attempts: %v %v", entry, err)
	}
}

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier/auditsink"
)

// TestAuditSinksConfig: audit.sinks is read with env: secrets and header
// values, file paths relative to the file, and refused naming the sink and
// field when a sink is incomplete.
func TestAuditSinksConfig(t *testing.T) {
	t.Setenv("SIEM_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("SIEM_KEY", "k-123")
	dir := t.TempDir()
	path := filepath.Join(dir, "countersign.yaml")
	src := `audit:
  sinks:
    - {name: siem, url: "https://siem.example/ingest", secrets: [env:SIEM_SECRET], headers: {X-Api-Key: env:SIEM_KEY}, tenants: [acme], timeout: 5s}
    - {name: syslog, syslog: "tcp+tls://logs.example:6514", ca_file: ca.pem, format: native, tenants: ["*"]}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := cfg.Audit.sinks()
	if err != nil {
		t.Fatal(err)
	}
	if len(sinks) != 2 || sinks[0].Secrets[0] != os.Getenv("SIEM_SECRET") || sinks[0].Headers["X-Api-Key"] != "k-123" ||
		sinks[0].Timeout.String() != "5s" || sinks[1].CAFile != filepath.Join(dir, "ca.pem") {
		t.Fatalf("sinks %+v", sinks)
	}
	for _, bad := range []struct{ src, want string }{
		{"audit:\n  sinks:\n    - {name: siem, url: \"https://siem.example\"}\n", "Sinks[0] (siem): Secrets"},
		{"audit:\n  sinks:\n    - {name: s, syslog: \"udp://h:514\"}\n", "Syslog"},
		{"audit:\n  sinks:\n    - {name: s, url: \"https://h\", secrets: [env:NOT_SET_ANYWHERE]}\n", "audit.sinks[0].secrets"},
	} {
		if err := os.WriteFile(path, []byte(bad.src), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if errs := cfg.Audit.validate(); len(errs) == 0 || !strings.Contains(errs[0].Error(), bad.want) {
			t.Errorf("%q: %v, want an error naming %s", bad.src, errs, bad.want)
		}
	}
}

// TestAuditSinksConfigOfTheDocs reads the audit.sinks example of
// docs/audit.md (Streaming to a SIEM) as serve does.
func TestAuditSinksConfigOfTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- run: TestAuditSinksConfigOfTheDocs -->\n```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/audit.md holds no audit.sinks example marked for this test")
	}
	t.Setenv("SIEM_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("SIEM_AUTHORIZATION", "Bearer siem-token")
	path := filepath.Join(t.TempDir(), "countersign.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Audit.validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	sinks, err := cfg.Audit.sinks()
	if err != nil || len(sinks) != 2 || sinks[0].Headers["Authorization"] != "Bearer siem-token" || sinks[1].Syslog == "" {
		t.Fatalf("sinks %+v, %v", sinks, err)
	}
}

// The audit sinks' durables are the notifier's as the built-in durables
// are their roles': on the embedded server serve configures, the API's
// credential and the arbiter's (both read HITL_AUDIT) may neither create,
// re-filter nor acknowledge a sink's durable; the notifier's may.
func TestServeProtectsTheAuditSinksDurables(t *testing.T) {
	t.Setenv("SIEM_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	path := filepath.Join(t.TempDir(), "countersign.yaml")
	src := "audit:\n  sinks:\n    - {name: siem, url: \"https://siem.example/ingest\", secrets: [env:SIEM_SECRET], tenants: [\"*\"]}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig{fileConfig: fc}
	cfg.Data = t.TempDir()
	users := embedded.GenerateUsers(embedded.Roles...)
	ec, err := embeddedConfig(cfg, users, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	as := func(r embedded.Role) (*nats.Conn, jetstream.JetStream) {
		for _, u := range users {
			if u.Role == r {
				nc, err := srv.Connect(u)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				return nc, js
			}
		}
		t.Fatalf("no %s user", r)
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, admin := as(embedded.RoleAdmin)
	if err := events.Provision(ctx, admin, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	durable := auditsink.DurablePrefix + "siem"
	for _, r := range []embedded.Role{embedded.RoleAPI, embedded.RoleArbiter} {
		nc, js := as(r)
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := js.CreateOrUpdateConsumer(cctx, audit.Stream, jetstream.ConsumerConfig{Durable: durable, FilterSubject: audit.SubjectPrefix + "nobody"})
		ccancel()
		if err == nil {
			t.Fatalf("the %s's credential created or changed the sink's durable", r)
		}
		if _, err := nc.Request("$JS.ACK."+audit.Stream+"."+durable+".1.1.1.1.0", nil, 2*time.Second); err == nil {
			t.Fatalf("the %s's credential acknowledged on the sink's durable", r)
		}
	}
	_, js := as(embedded.RoleNotifier)
	if _, err := js.CreateOrUpdateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("the notifier's own sink durable: %v", err)
	}
}

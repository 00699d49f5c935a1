package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
)

func TestNewToken(t *testing.T) {
	tok, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "cs_") || len(tok) != 3+43 || hash != api.HashToken(tok) || len(hash) != 64 || strings.ToLower(hash) != hash {
		t.Fatalf("token %q hash %q", tok, hash)
	}
	if other, _, _ := api.NewToken(); other == tok {
		t.Fatal("two tokens are equal")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	if _, err := api.New(ctx, api.Config{}); err == nil || !strings.Contains(err.Error(), "Config.JS") || !strings.Contains(err.Error(), "Config.Gate") {
		t.Fatalf("empty config: %v", err)
	}
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: srv.JetStreamAs(embedded.RoleAPI)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	_, hash, _ := api.NewToken()
	_, err = api.New(ctx, api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Tokens: []api.Token{
		{Name: "ok", Subject: "a", SHA256: hash, Roles: []string{api.RoleAgent}},
		{Name: "short", Subject: "b", SHA256: "abc", Roles: []string{api.RoleAgent}},
		{Name: "nosubject", SHA256: api.HashToken("x"), Roles: []string{"root"}},
		{Name: "dup", Subject: "c", SHA256: hash, Roles: []string{api.RoleAdmin}},
	}})
	for _, want := range []string{"Config.Tokens[1] (short).SHA256", "Config.Tokens[2] (nosubject).Subject", `unknown role "root"`, "Config.Tokens[3] (dup).SHA256 is the same as Config.Tokens[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not mention %q", err, want)
		}
	}
	// A failing readiness check makes /readyz answer 503.
	reg := prometheus.NewRegistry()
	s, err := api.New(ctx, api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Registerer: reg, Ready: func(context.Context) error { return errors.New("policy not loaded") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	resp, err := http.Get(hs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz: %d", resp.StatusCode)
	}
	// Metrics cannot be registered twice on one registry.
	if _, err := api.New(ctx, api.Config{JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Registerer: reg}); err == nil {
		t.Fatal("a second server registered the same metrics")
	}
}

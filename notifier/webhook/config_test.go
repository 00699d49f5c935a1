package webhook_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/webhook"
)

func TestNewValidation(t *testing.T) {
	const url = "https://hooks.example.com/in/tok_9f8e7d?sig=abc"
	ok := func(name string) webhook.Endpoint {
		return webhook.Endpoint{Name: name, URL: url, Secrets: []string{secretA}}
	}
	with := func(f func(*webhook.Endpoint)) []webhook.Endpoint {
		e := ok("ops")
		f(&e)
		return []webhook.Endpoint{e}
	}
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("only-twenty-three-bytes"))

	tests := []struct {
		name      string
		endpoints []webhook.Endpoint
		wantErr   string // "" for a valid config
	}{
		{"one endpoint", []webhook.Endpoint{ok("ops")}, ""},
		{"several endpoints", []webhook.Endpoint{ok("ops"), ok("audit-log"), ok("team_2")}, ""},
		{"secret without prefix", with(func(e *webhook.Endpoint) { e.Secrets = []string{strings.TrimPrefix(secretA, "whsec_")} }), ""},
		{"two secrets", with(func(e *webhook.Endpoint) { e.Secrets = []string{secretA, secretB} }), ""},
		{"http URL", with(func(e *webhook.Endpoint) { e.URL = "http://10.0.0.7:8080/hook" }), ""},
		{"timeout", with(func(e *webhook.Endpoint) { e.Timeout = time.Second }), ""},

		{"no endpoints", nil, "at least one endpoint"},
		{"empty name", []webhook.Endpoint{ok("")}, "Endpoints[0]: Name"},
		{"upper-case name", []webhook.Endpoint{ok("Ops")}, "Endpoints[0]: Name"},
		{"dotted name", []webhook.Endpoint{ok("ops.eu")}, "Endpoints[0]: Name"},
		{"long name", []webhook.Endpoint{ok(strings.Repeat("a", 33))}, "Endpoints[0]: Name"},
		{"duplicate name", []webhook.Endpoint{ok("ops"), ok("audit"), ok("ops")}, `Endpoints[2] ("ops"): Name: duplicate`},
		{"empty URL", with(func(e *webhook.Endpoint) { e.URL = "" }), `("ops"): URL`},
		{"relative URL", with(func(e *webhook.Endpoint) { e.URL = "/in/tok_9f8e7d" }), "URL"},
		{"no host", with(func(e *webhook.Endpoint) { e.URL = "https:///in/tok_9f8e7d" }), "URL"},
		{"ftp URL", with(func(e *webhook.Endpoint) { e.URL = "ftp://hooks.example.com/tok_9f8e7d" }), "URL"},
		{"opaque URL", with(func(e *webhook.Endpoint) { e.URL = "https:tok_9f8e7d" }), "URL"},
		{"unparsable URL", with(func(e *webhook.Endpoint) { e.URL = "https://hooks.example.com/%zz/tok_9f8e7d" }), "URL"},
		{"no secrets", with(func(e *webhook.Endpoint) { e.Secrets = nil }), "Secrets: at least one"},
		{"empty secret", with(func(e *webhook.Endpoint) { e.Secrets = []string{""} }), "Secrets[0]"},
		{"short secret", with(func(e *webhook.Endpoint) { e.Secrets = []string{secretA, short} }), "Secrets[1]"},
		{"garbled secret", with(func(e *webhook.Endpoint) { e.Secrets = []string{"whsec_tok_9f8e7d"} }), "Secrets[0]"},
		{"negative timeout", with(func(e *webhook.Endpoint) { e.Timeout = -time.Second }), "Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := webhook.New(webhook.Config{Endpoints: tt.endpoints})
			if tt.wantErr == "" {
				if err != nil || ch == nil {
					t.Fatalf("New = %v, %v; want a channel", ch, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error containing %q", tt.wantErr)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.wantErr) {
				t.Errorf("New error %q does not contain %q", msg, tt.wantErr)
			}
			for _, e := range tt.endpoints {
				assertHidden(t, msg, e.URL)
				for _, s := range e.Secrets {
					assertHidden(t, msg, strings.TrimPrefix(s, "whsec_"))
				}
			}
			assertHidden(t, msg, "tok_9f8e7d")
		})
	}
}

// TestNewReportsEveryProblem: one error lists all invalid fields.
func TestNewReportsEveryProblem(t *testing.T) {
	_, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{
		{Name: "ops", URL: "ftp://x", Secrets: []string{secretA}},
		{Name: "audit", URL: "https://x.example", Secrets: nil, Timeout: -1},
	}})
	if err == nil {
		t.Fatal("New succeeded")
	}
	for _, want := range []string{`Endpoints[0] ("ops"): URL`, `Endpoints[1] ("audit"): Secrets`, `Endpoints[1] ("audit"): Timeout`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New error %q does not contain %q", err, want)
		}
	}
}

func TestName(t *testing.T) {
	ch, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{{Name: "ops", URL: "https://x.example", Secrets: []string{secretA}}}})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Name() != "webhook" {
		t.Errorf("Name = %q, want webhook", ch.Name())
	}
}

// assertHidden fails when s (non-empty) appears in text.
func assertHidden(t *testing.T, text, s string) {
	t.Helper()
	if s != "" && strings.Contains(text, s) {
		t.Errorf("%q appears in %q", s, text)
	}
}

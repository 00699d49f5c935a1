package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration that sets a key twice is refused, naming the key: which
// of the two values a reader takes is not something to guess about.
func TestConfigWithARepeatedKeyIsRefused(t *testing.T) {
	for _, c := range []struct{ name, src, key string }{
		{"top level", "addr: 127.0.0.1:8080\ndata: ./data\naddr: 0.0.0.0:80\n", "addr"},
		{"nested", "nats:\n  sync: always\n  listen: off\n  sync: lazy\n", "sync"},
		{"in a list item", "tokens:\n  - name: a\n    subject: a\n    roles: [admin]\n    roles: [agent]\n", "roles"},
		{"JSON, one escaped", `{"addr": "127.0.0.1:8080", "\u0061ddr": "0.0.0.0:80"}`, "addr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "countersign.yaml")
			if err := os.WriteFile(path, []byte(c.src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadConfig(path)
			if err == nil || !strings.Contains(err.Error(), `mapping key "`+c.key+`" already defined`) {
				t.Fatalf("loadConfig: %v, want the repeated key %q named", err, c.key)
			}
		})
	}
}

func TestJSONInputWithARepeatedKeyIsRefused(t *testing.T) {
	_, err := jsonInput("", `{"amount": 1, "to": {"iban": "x", "iban": "y"}}`, "--args or --json")
	if err == nil || !strings.Contains(err.Error(), `"to.iban" twice`) {
		t.Fatalf("jsonInput: %v", err)
	}
	if got, err := jsonInput("", ` {"amount": 1} `, "--args or --json"); err != nil || string(got) != `{"amount": 1}` {
		t.Fatalf("jsonInput: %s, %v", got, err)
	}
}

// A connection to an external server takes its replies on the inboxes its
// role's user may read (deploy/ grants each role _INBOX_<role>.> alone).
func TestExternalInboxPrefix(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  natsConfig
		want string
	}{
		{"a role's user", natsConfig{URL: "nats://n1:4222", User: "arbiter"}, "_INBOX_arbiter"},
		{"the user in the URL", natsConfig{URL: "nats://api:secret@n1:4222,nats://api:secret@n2:4222"}, "_INBOX_api"},
		{"configured", natsConfig{URL: "nats://notifier:x@n1:4222", InboxPrefix: "_INBOX_custom"}, "_INBOX_custom"},
		{"another user", natsConfig{URL: "nats://n1:4222", User: "ops"}, ""},
		{"a credentials file", natsConfig{URL: "nats://n1:4222", CredsFile: "/etc/nats/user.creds"}, ""},
		{"admin", natsConfig{URL: "nats://admin:x@n1:4222"}, "_INBOX"},
	} {
		if got := externalInboxPrefix(c.cfg); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

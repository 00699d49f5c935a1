// Package deploy_test checks the deployment files in deploy/: the NATS
// cluster configs, the Kubernetes manifests and Helm values, the systemd
// units, the Compose file and the Grafana dashboard. Each check compares a
// file with the code it has to agree with (the role permissions, the serve
// flags, the exported metrics), so the files cannot drift silently.
package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/events/embedded"
)

// serveRoles are the roles `countersign serve --roles` runs as processes.
var serveRoles = []string{"arbiter", "api", "notifier"}

// passwordEnv is the environment variable that holds a NATS user's password.
func passwordEnv(user string) string {
	return "COUNTERSIGN_" + strings.ToUpper(user) + "_PASSWORD"
}

// natsUsers are every NATS user of the deployment: one per role, plus the
// system account's user.
func natsUsers() []string {
	users := []string{"sys"}
	for _, r := range embedded.Roles {
		users = append(users, string(r))
	}
	return users
}

// setPasswords puts a generated password for every NATS user in the
// environment (restored after the test) and returns them by user.
func setPasswords(t *testing.T) map[string]string {
	t.Helper()
	pw := map[string]string{}
	for _, u := range natsUsers() {
		// nats-server parses a variable's value as a config value: a
		// password must start with a letter to be read as a plain string.
		// deploy/README.md generates them this way.
		p := "cs_" + embedded.GenerateUsers(embedded.RoleAdmin)[0].Password
		t.Setenv(passwordEnv(u), p)
		pw[u] = p
	}
	return pw
}

// comparePermissions reports every difference between a user's permissions
// in a config file and embedded.Permissions(role).
func comparePermissions(t *testing.T, where string, role embedded.Role, got *server.Permissions) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: %s has no permissions", where, role)
		return
	}
	want := embedded.Permissions(role)
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
				t.Errorf("%s: %s %s: config has\n  %q\nPermissions has\n  %q", where, role, what, a, b)
			}
		}
	}
	compare("publish", got.Publish, want.Publish)
	compare("subscribe", got.Subscribe, want.Subscribe)
	if !reflect.DeepEqual(got.Response, want.Response) {
		t.Errorf("%s: %s: allow_responses %+v, Permissions has %+v", where, role, got.Response, want.Response)
	}
}

// yamlDocs parses every document of a (multi-document) YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML documents", path)
	}
	return docs
}

// dig follows keys (strings for maps, ints for lists) into parsed YAML or
// JSON and returns the value, or nil if any step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := dig(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := dig(v, path...).([]any)
	return l
}

func obj(v any, path ...any) map[string]any {
	m, _ := dig(v, path...).(map[string]any)
	return m
}

// strings of a YAML list (non-strings are skipped).
func stringsOf(l []any) []string {
	var out []string
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// files lists path's files with the given extension, sorted.
func files(t *testing.T, dir, ext string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatalf("no %s files in %s", ext, dir)
	}
	slices.Sort(m)
	return m
}

package directory_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/orchestrator/directory"
)

func hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// sample is a valid directory; the tokens are "tok-alice", "tok-alice-2",
// "tok-bob" and "tok-dana".
var sample = fmt.Sprintf(`# approvers
groups:
  finance: {description: "Pays suppliers"}
  treasury: {}
  sre:
  empty: {description: nobody yet}
users:
  - id: alice
    name: Alice Liddell
    email: Alice@Example.com
    slack_user_id: U024BE7LH
    groups: [finance, treasury]
    tokens:
      - {name: alice-laptop, sha256: %q, roles: [approver]}
      - {name: alice-ci, sha256: %q, roles: [agent, approver]}
  - id: bob
    email: bob@example.com
    slack_user_id: W0123ABC
    oidc_subject: 00u1bob
    quiet_hours: "22:00-07:00 Europe/Berlin"
    groups: [finance]
    tokens:
      - sha256: %q
        roles: [approver]
  - id: carol
    groups: [treasury, sre]
  - id: dana
    groups: [sre]
    tokens:
      - {sha256: %q, roles: [admin]}
`, hash("tok-alice"), strings.ToUpper(hash("tok-alice-2")), hash("tok-bob"), hash("tok-dana"))

func mustParse(t *testing.T, src string) *directory.Directory {
	t.Helper()
	d, err := directory.Parse([]byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return d
}

func TestLookups(t *testing.T) {
	d := mustParse(t, sample)
	if d.Len() != 4 || len(d.SHA256()) != 64 {
		t.Fatalf("len %d sha %q", d.Len(), d.SHA256())
	}
	u, ok := d.User("alice")
	if !ok || u.Name != "Alice Liddell" || u.SlackUserID != "U024BE7LH" || !slices.Equal(u.Groups, []string{"finance", "treasury"}) ||
		len(u.Tokens) != 2 || u.Tokens[0].Name != "alice-laptop" || u.Tokens[1].SHA256 != hash("tok-alice-2") {
		t.Fatalf("alice: %+v %v", u, ok)
	}
	if _, ok := d.User("Alice"); ok {
		t.Error("ids are case-sensitive")
	}
	if u, ok := d.BySlackID("W0123ABC"); !ok || u.ID != "bob" {
		t.Errorf("BySlackID: %+v %v", u, ok)
	}
	if _, ok := d.BySlackID(""); ok {
		t.Error("empty Slack id found someone")
	}
	if u, ok := d.ByOIDCSubject("00u1bob"); !ok || u.ID != "bob" || u.OIDCSubject != "00u1bob" {
		t.Errorf("ByOIDCSubject: %+v %v", u, ok)
	}
	// bob's quiet hours, 22:00-07:00 in Berlin (UTC+1 in December): quiet
	// at 23:30 UTC until 06:00 UTC; alice has none.
	if u, _ := d.User("bob"); u.Quiet == nil {
		t.Error("bob's quiet_hours were not read")
	} else if on, until := u.Quiet.Active(time.Date(2026, 12, 7, 23, 30, 0, 0, time.UTC)); !on || !until.Equal(time.Date(2026, 12, 8, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("bob at 23:30 UTC: quiet %v until %s, want until 06:00 UTC", on, until)
	}
	if u, _ := d.User("alice"); u.Quiet != nil {
		t.Errorf("alice has quiet hours %+v, set none", u.Quiet)
	}
	for _, sub := range []string{"", "00U1BOB", "00u1bob "} {
		if u, ok := d.ByOIDCSubject(sub); ok {
			t.Errorf("ByOIDCSubject(%q) found %s: subjects compare exactly", sub, u.ID)
		}
	}
	for _, addr := range []string{"alice@example.com", "ALICE@EXAMPLE.COM", " Alice@Example.com ", "Alice L. <alice@example.COM>"} {
		if u, ok := d.ByEmail(addr); !ok || u.ID != "alice" {
			t.Errorf("ByEmail(%q): %+v %v", addr, u, ok)
		}
	}
	if _, ok := d.ByEmail("mallory@example.com"); ok {
		t.Error("unknown email found")
	}
	if got := d.Members("finance"); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Errorf("finance: %v", got)
	}
	if got := d.Members("group:sre"); !slices.Equal(got, []string{"carol", "dana"}) {
		t.Errorf("group:sre: %v", got)
	}
	if d.Members("nope") != nil || d.HasGroup("nope") || !d.HasGroup("empty") || d.Members("empty") != nil {
		t.Error("unknown and empty groups")
	}
	var names []string
	for _, g := range d.Groups() {
		names = append(names, g.Name)
		if g.Name == "finance" && g.Description != "Pays suppliers" {
			t.Errorf("finance description %q", g.Description)
		}
	}
	if !slices.Equal(names, []string{"empty", "finance", "sre", "treasury"}) {
		t.Errorf("groups %v", names)
	}
	// Results are copies: changing them changes nothing in the directory.
	u.Groups[0] = "root"
	d.Members("finance")[0] = "mallory"
	if again, _ := d.User("alice"); again.Groups[0] != "finance" || d.Members("finance")[0] != "alice" {
		t.Error("a lookup result aliases the directory")
	}
}

func TestImplicitGroups(t *testing.T) {
	// Without a groups: section, users' groups define them.
	d := mustParse(t, "users:\n  - {id: a, groups: [ops]}\n  - {id: b, groups: [ops, dev]}\n")
	if !slices.Equal(d.Members("ops"), []string{"a", "b"}) || !slices.Equal(d.Members("dev"), []string{"b"}) {
		t.Fatalf("ops %v dev %v", d.Members("ops"), d.Members("dev"))
	}
	// An empty list of users is a valid (empty) directory.
	if d := mustParse(t, "users: []\n"); d.Len() != 0 {
		t.Fatal("users: [] has users")
	}
}

func TestResolveApprovers(t *testing.T) {
	d := mustParse(t, sample)
	for _, c := range []struct {
		in, ids, unknown []string
	}{
		{nil, []string{}, nil},
		{[]string{"group:finance"}, []string{"alice", "bob"}, nil},
		{[]string{"carol", "group:finance", "bob", "group:treasury"}, []string{"carol", "alice", "bob"}, nil},
		{[]string{"group:finance", "group:nope"}, []string{"alice", "bob", "group:nope"}, []string{"group:nope"}},
		// A declared group without members fails closed too.
		{[]string{"group:empty"}, []string{"group:empty"}, []string{"group:empty"}},
		// User ids unknown to the directory are kept: they may authenticate otherwise.
		{[]string{"zed", "zed"}, []string{"zed"}, nil},
	} {
		ids, unknown := d.ResolveApprovers(c.in)
		if !slices.Equal(ids, c.ids) || !slices.Equal(unknown, c.unknown) {
			t.Errorf("ResolveApprovers(%v) = %v, %v; want %v, %v", c.in, ids, unknown, c.ids, c.unknown)
		}
	}
	// A nil directory resolves nothing and keeps every group, failing closed.
	var none *directory.Directory
	if ids, unknown := none.ResolveApprovers([]string{"a", "group:g"}); !slices.Equal(ids, []string{"a", "group:g"}) || !slices.Equal(unknown, []string{"group:g"}) {
		t.Errorf("nil directory: %v %v", ids, unknown)
	}
}

func TestAuthenticate(t *testing.T) {
	d := mustParse(t, sample)
	for _, c := range []struct {
		bearer, user, token string
		roles               []string
	}{
		{"tok-alice", "alice", "alice-laptop", []string{"approver"}},
		{"tok-alice-2", "alice", "alice-ci", []string{"agent", "approver"}},
		{"tok-bob", "bob", "bob", []string{"approver"}},
		{"tok-dana", "dana", "dana", []string{"admin"}},
	} {
		u, tok, ok := d.Authenticate(c.bearer)
		if !ok || u.ID != c.user || tok.Name != c.token || !slices.Equal(tok.Roles, c.roles) {
			t.Errorf("Authenticate(%q) = %s %+v %v; want %s %s %v", c.bearer, u.ID, tok, ok, c.user, c.token, c.roles)
		}
	}
	for _, bad := range []string{"", "tok-carol", "tok-alice ", hash("tok-alice"), "TOK-ALICE"} {
		if u, _, ok := d.Authenticate(bad); ok {
			t.Errorf("Authenticate(%q) accepted as %s", bad, u.ID)
		}
	}
	var none *directory.Directory
	if _, _, ok := none.Authenticate("tok-alice"); ok {
		t.Error("nil directory authenticated")
	}
	// Every position in a large directory is found, the first and the last.
	var b strings.Builder
	b.WriteString("users:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "  - {id: u%d, tokens: [{sha256: %s, roles: [approver]}]}\n", i, hash(fmt.Sprint("t", i)))
	}
	big := mustParse(t, b.String())
	for _, i := range []int{0, 1, 150, 299} {
		if u, _, ok := big.Authenticate(fmt.Sprint("t", i)); !ok || u.ID != fmt.Sprint("u", i) {
			t.Errorf("token %d: %s %v", i, u.ID, ok)
		}
	}
}

func TestParseErrors(t *testing.T) {
	h := hash("x")
	for _, c := range []struct {
		name, src string
		want      []string // each must appear, as "LINE: message" fragments
	}{
		{"empty", "", []string{"the file is empty"}},
		{"comments only", "# nothing\n", []string{"the file is empty"}},
		{"no users", "groups: {}\n", []string{"1: users: is required"}},
		{"two documents", "users: []\n---\nusers: []\n", []string{"2: a second YAML document"}},
		{"syntax", "users:\n\t- id: a\n", []string{"2: found character that cannot start any token"}},
		{"duplicate key", "users:\n  - id: a\n    id: b\n", []string{`3: mapping key "id" already defined at line 2`}},
		{"duplicate key in JSON", `{"users": [{"id": "a", "email": "a@example.com", "\u0069d": "b"}]}`, []string{`1: mapping key "id" already defined at line 1`}},
		{"unknown top field", "users: []\nadmins: [a]\n", []string{`2: unknown field "admins"`}},
		{"unknown user field", "users:\n  - id: a\n    mail: a@example.com\n", []string{`3: unknown field "mail"`}},
		{"unknown token field", "users:\n  - id: a\n    tokens:\n      - {token: abc, roles: [admin]}\n", []string{`4: unknown field "token"`}},
		{"wrong type", "users:\n  - id: a\n    groups: finance\n", []string{"3: cannot unmarshal"}},
		{"users not a list", "users: {a: 1}\n", []string{"1: cannot unmarshal"}},
		{"missing id", "users:\n  - name: Nobody\n", []string{"2: users[0]: id is required"}},
		{"id with space", "users:\n  - id: \"a b\"\n", []string{"2: users[0]: id \"a b\": contains spaces"}},
		{"id names a group", "users:\n  - id: group:x\n", []string{`2: users[0]: id "group:x": must not start with "group:"`}},
		{"duplicate id", "users:\n  - id: a\n  - id: b\n  - id: a\n", []string{`4: users[2] (a): id "a" is also the id of users[0]`}},
		{"bad email", "users:\n  - id: a\n    email: \"Alice <a@example.com>\"\n", []string{"3: users[0] (a): email"}},
		{"duplicate email", "users:\n  - {id: a, email: A@example.com}\n  - {id: b, email: a@EXAMPLE.com}\n", []string{`3: users[1] (b): email "a@EXAMPLE.com" is also the email of users[0]`}},
		{"bad slack id", "users:\n  - {id: a, slack_user_id: alice}\n", []string{"2: users[0] (a): slack_user_id \"alice\" is not a Slack user id"}},
		{"duplicate slack id", "users:\n  - {id: a, slack_user_id: U1AB}\n  - {id: b, slack_user_id: U1AB}\n", []string{"3: users[1] (b): slack_user_id"}},
		{"bad quiet hours", "users:\n  - {id: a, quiet_hours: \"22:00-25:00\"}\n", []string{`2: users[0] (a): quiet hours "22:00-25:00"`}},
		{"bad oidc subject", "users:\n  - {id: a, oidc_subject: \"a b\"}\n", []string{`2: users[0] (a): oidc_subject "a b" is not a subject`}},
		{"duplicate oidc subject", "users:\n  - {id: a, oidc_subject: 248289761001}\n  - {id: b, oidc_subject: \"248289761001\"}\n", []string{`3: users[1] (b): oidc_subject "248289761001" is also the subject of users[0]`}},
		{"prefixed group", "users:\n  - id: a\n    groups: [group:finance]\n", []string{`3: users[0] (a): groups: write "finance", not "group:finance"`}},
		{"undeclared group", "groups:\n  finance: {}\nusers:\n  - id: a\n    groups:\n      - finance\n      - fiance\n", []string{`7: users[0] (a): groups: "fiance" is not declared`}},
		{"group twice", "users:\n  - id: a\n    groups: [x, x]\n", []string{`3: users[0] (a): groups: "x" is listed twice`}},
		{"bad group name", "groups:\n  \"a b\": {}\nusers: []\n", []string{`2: groups: "a b": contains spaces`}},
		{"short hash", "users:\n  - id: a\n    tokens:\n      - sha256: abc\n        roles: [admin]\n", []string{"4: users[0] (a): tokens[0]: sha256 must be 64 hex"}},
		{"plaintext token", "users:\n  - id: a\n    tokens: [{sha256: cs_abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstu, roles: [admin]}]\n", []string{"3: users[0] (a): tokens[0]: sha256 must be 64 hex"}},
		{"no roles", "users:\n  - id: a\n    tokens:\n      - sha256: " + h + "\n", []string{"4: users[0] (a): tokens[0]: roles must list"}},
		{"unknown role", "users:\n  - id: a\n    tokens:\n      - sha256: " + h + "\n        roles:\n          - approver\n          - root\n", []string{`7: users[0] (a): tokens[0]: unknown role "root"`}},
		{"token names clash", "users:\n  - id: a\n    tokens:\n      - {sha256: " + h + ", roles: [admin]}\n      - {sha256: " + hash("y") + ", roles: [admin]}\n", []string{`5: users[0] (a): tokens[1]: name "a" is used by another token`}},
		{"shared hash", "users:\n  - id: a\n    tokens: [{sha256: " + h + ", roles: [admin]}]\n  - id: b\n    tokens: [{sha256: " + strings.ToUpper(h) + ", roles: [agent]}]\n", []string{"5: users[1] (b): tokens[0]: sha256 is the same as users[0] (a): tokens[0]'s"}},
		{"several at once", "users:\n  - id: a\n    email: nope\n  - id: a\n", []string{"3: users[0] (a): email", `4: users[1] (a): id "a" is also`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := directory.Parse([]byte(c.src))
			var e *directory.Error
			if d != nil || !errors.As(err, &e) {
				t.Fatalf("Parse = %v, %v; want an *Error", d, err)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "directory.") && strings.Contains(msg, "Spec") {
				t.Errorf("error names a Go type: %s", msg)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := writeFile(t, "users:\n  - id: \"\"\n")
	_, err := directory.Load(path)
	if err == nil || !strings.Contains(err.Error(), path+":2: users[0]: id is required") {
		t.Fatalf("Load: %v", err)
	}
	if _, err := directory.Load(path + ".missing"); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

func TestDeployExample(t *testing.T) {
	d, err := directory.Load("../../deploy/directory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for group, want := range map[string][]string{
		"finance": {"alice", "bob", "carol"}, "treasury": {"bob", "dana"}, "sre": {"carol", "dana"},
	} {
		if got := d.Members(group); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", group, got, want)
		}
	}
	if u, ok := d.BySlackID("U024BE7LH"); !ok || u.ID != "alice" {
		t.Errorf("alice's Slack id: %+v %v", u, ok)
	}
	for _, u := range d.Users() {
		if len(u.Tokens) == 0 {
			t.Errorf("%s has no token hash", u.ID)
		}
	}
}

package directory

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// maxID bounds user ids, group names and token names.
const maxID = 128

// Problem is one error in a directory file. Line counts from 1; 0 means the
// file as a whole.
type Problem struct {
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// String formats the problem as "LINE: message".
func (p Problem) String() string {
	if p.Line > 0 {
		return strconv.Itoa(p.Line) + ": " + p.Message
	}
	return p.Message
}

// Error is the error Parse and Load return for an invalid file: every
// problem found, in line order.
type Error struct {
	// File is the path, when known (Load sets it).
	File     string
	Problems []Problem
}

// Error lists one problem per line as "FILE:LINE: message".
func (e *Error) Error() string {
	prefix := "directory: "
	if e.File != "" {
		prefix += e.File + ":"
	}
	if len(e.Problems) == 0 {
		return prefix + " invalid"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(prefix)
		if e.File != "" && p.Line == 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Load reads and parses a directory file.
func Load(path string) (*Directory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	d, err := Parse(data)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = path
		}
		return nil, err
	}
	return d, nil
}

// The file as written. Decoding into these types with known fields only is
// what makes unknown fields and wrong types errors.
type fileSpec struct {
	Users  *[]userSpec           `yaml:"users"`
	Groups map[string]*groupSpec `yaml:"groups"`
}

type userSpec struct {
	ID          string      `yaml:"id"`
	Name        string      `yaml:"name"`
	Email       string      `yaml:"email"`
	SlackUserID string      `yaml:"slack_user_id"`
	OIDCSubject string      `yaml:"oidc_subject"`
	QuietHours  string      `yaml:"quiet_hours"`
	Groups      []string    `yaml:"groups"`
	Tokens      []tokenSpec `yaml:"tokens"`
	Tenants     []string    `yaml:"tenants"`
}

type tokenSpec struct {
	Name    string   `yaml:"name"`
	SHA256  string   `yaml:"sha256"`
	Roles   []string `yaml:"roles"`
	Tenants []string `yaml:"tenants"`
	Agents  []string `yaml:"agents"`
}

type groupSpec struct {
	Description string `yaml:"description"`
}

// Parse reads and validates a directory. When the file is invalid the error
// is an *Error listing every problem with its line.
func Parse(data []byte) (*Directory, error) {
	var ps problems
	spec, root := decode(data, &ps)
	if spec == nil {
		return nil, ps.err()
	}
	d := build(spec, root, &ps)
	scopes(spec, root, d, &ps)
	if len(ps) > 0 {
		return nil, ps.err()
	}
	d.sum = sha256.Sum256(data)
	return d, nil
}

type problems []Problem

func (ps *problems) add(line int, format string, args ...any) {
	*ps = append(*ps, Problem{Line: line, Message: fmt.Sprintf(format, args...)})
}

func (ps problems) err() error {
	out := slices.Clone([]Problem(ps))
	slices.SortStableFunc(out, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	return &Error{Problems: out}
}

// decode reads data strictly into a fileSpec and, for positions, into a
// node tree. It returns nil after recording why it could not.
func decode(data []byte, ps *problems) (*fileSpec, *yaml.Node) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	switch err := dec.Decode(&root); {
	case errors.Is(err, io.EOF):
		ps.add(0, "the file is empty (want users: [...])")
		return nil, nil
	case err != nil:
		ps.yamlError(err)
		return nil, nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		ps.add(extra.Line, "a second YAML document; the file must hold one document")
		return nil, nil
	}
	if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
		ps.add(0, "the file is empty (want users: [...])")
		return nil, nil
	}
	var spec fileSpec
	sdec := yaml.NewDecoder(bytes.NewReader(data))
	sdec.KnownFields(true)
	if err := sdec.Decode(&spec); err != nil {
		ps.yamlError(err)
		return nil, nil
	}
	if spec.Users == nil {
		ps.add(root.Content[0].Line, "users: is required (a list, possibly empty)")
		return nil, nil
	}
	return &spec, root.Content[0]
}

var (
	lineRe     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	notFoundRe = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	typeRe     = regexp.MustCompile(` into (?:\[\])?(?:\*)?directory\.\w+$`)
)

// yamlError records the YAML library's errors with their lines, in words
// that name no Go types.
func (ps *problems) yamlError(err error) {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	for _, m := range msgs {
		line := 0
		if sub := lineRe.FindStringSubmatch(m); sub != nil {
			line, _ = strconv.Atoi(sub[1])
			m = sub[2]
		}
		m = strings.TrimPrefix(m, "yaml: ")
		if sub := notFoundRe.FindStringSubmatch(m); sub != nil {
			m = fmt.Sprintf("unknown field %q", sub[1])
		}
		m = typeRe.ReplaceAllString(m, " where a mapping is expected")
		ps.add(line, "%s", m)
	}
}

// build validates spec and indexes it. root gives positions.
func build(spec *fileSpec, root *yaml.Node, ps *problems) *Directory {
	b := &builder{
		d: &Directory{
			byID: map[string]int{}, bySlack: map[string]int{}, byEmail: map[string]int{}, bySub: map[string]int{},
			groups: map[string]*Group{},
		},
		ps:       ps,
		declared: spec.Groups != nil,
		hashes:   map[[sha256.Size]byte]string{},
	}
	b.groups(spec.Groups, mapValue(root, "groups"))
	usersNode := mapValue(root, "users")
	for i, us := range *spec.Users {
		b.user(i, us, seqItem(usersNode, i))
	}
	b.members()
	return b.d
}

// builder is the state of one build: the directory so far and what it
// must stay unique across users.
type builder struct {
	d        *Directory
	ps       *problems
	declared bool                         // the file has a groups: section
	hashes   map[[sha256.Size]byte]string // token hash → where it was seen
}

// groups adds the declared groups.
func (b *builder) groups(groups map[string]*groupSpec, node *yaml.Node) {
	for name, g := range groups {
		if msg := badName(name); msg != "" {
			b.ps.add(keyLine(node, name), "groups: %q: %s", name, msg)
			continue
		}
		grp := &Group{Name: name}
		if g != nil {
			grp.Description = g.Description
		}
		b.d.groups[name] = grp
	}
}

// fieldLine is the line of field in mapping n, or of n when it has none.
func fieldLine(n *yaml.Node, field string) int {
	if v := mapValue(n, field); v != nil {
		return v.Line
	}
	return lineOf(n)
}

// user validates users[i] and adds it.
func (b *builder) user(i int, us userSpec, un *yaml.Node) {
	d := b.d
	where := b.userID(i, us.ID, un)
	u := User{ID: us.ID, Name: us.Name, Email: us.Email, SlackUserID: us.SlackUserID, OIDCSubject: us.OIDCSubject}
	b.email(i, where, us.Email, un)
	b.slackUser(i, where, us.SlackUserID, un)
	b.oidcSubject(i, where, us.OIDCSubject, un)
	if us.QuietHours != "" {
		if q, err := ParseQuietHours(us.QuietHours); err != nil {
			b.ps.add(fieldLine(un, "quiet_hours"), "%s: %v", where, err)
		} else {
			u.Quiet = &q
		}
	}
	u.Groups = b.userGroups(where, us.Groups, mapValue(un, "groups"))
	tn := mapValue(un, "tokens")
	for j, ts := range us.Tokens {
		u.Tokens = append(u.Tokens, b.token(i, fmt.Sprintf("%s: tokens[%d]", where, j), us.ID, ts, u.Tokens, seqItem(tn, j)))
	}
	if _, dup := d.byID[us.ID]; !dup && us.ID != "" {
		d.byID[us.ID] = i
	}
	d.users = append(d.users, u)
}

// userID checks users[i]'s id and returns how problems name the user.
func (b *builder) userID(i int, id string, un *yaml.Node) string {
	where := fmt.Sprintf("users[%d]", i)
	switch msg := badID(id); {
	case id == "":
		b.ps.add(lineOf(un), "%s: id is required", where)
	case msg != "":
		b.ps.add(fieldLine(un, "id"), "%s: id %q: %s", where, id, msg)
	default:
		where = fmt.Sprintf("users[%d] (%s)", i, id)
		if j, dup := b.d.byID[id]; dup {
			b.ps.add(fieldLine(un, "id"), "%s: id %q is also the id of users[%d]", where, id, j)
		}
	}
	return where
}

// email checks and indexes users[i]'s email, if it has one.
func (b *builder) email(i int, where, email string, un *yaml.Node) {
	if email == "" {
		return
	}
	a, err := mail.ParseAddress(email)
	switch key := strings.ToLower(email); {
	case err != nil || a.Address != email:
		b.ps.add(fieldLine(un, "email"), "%s: email %q is not a bare address like alice@example.com", where, email)
	default:
		if j, dup := b.d.byEmail[key]; dup {
			b.ps.add(fieldLine(un, "email"), "%s: email %q is also the email of users[%d]", where, email, j)
		} else {
			b.d.byEmail[key] = i
		}
	}
}

// maxSubject bounds an OIDC subject (OpenID Connect Core §2: at most 255
// ASCII characters).
const maxSubject = 255

// oidcSubject checks and indexes users[i]'s OIDC subject, if it has one.
func (b *builder) oidcSubject(i int, where, sub string, un *yaml.Node) {
	if sub == "" {
		return
	}
	printable := true
	for _, c := range sub {
		if c < 0x21 || c > 0x7e {
			printable = false
		}
	}
	if !printable || len(sub) > maxSubject {
		b.ps.add(fieldLine(un, "oidc_subject"), "%s: oidc_subject %q is not a subject (1 to %d printable ASCII characters, no spaces)", where, sub, maxSubject)
	} else if j, dup := b.d.bySub[sub]; dup {
		b.ps.add(fieldLine(un, "oidc_subject"), "%s: oidc_subject %q is also the subject of users[%d]", where, sub, j)
	} else {
		b.d.bySub[sub] = i
	}
}

// slackUser checks and indexes users[i]'s Slack user id, if it has one.
func (b *builder) slackUser(i int, where, id string, un *yaml.Node) {
	if id == "" {
		return
	}
	if !slackID(id) {
		b.ps.add(fieldLine(un, "slack_user_id"), "%s: slack_user_id %q is not a Slack user id (U or W, then upper-case letters and digits)", where, id)
	} else if j, dup := b.d.bySlack[id]; dup {
		b.ps.add(fieldLine(un, "slack_user_id"), "%s: slack_user_id %q is also the Slack user id of users[%d]", where, id, j)
	} else {
		b.d.bySlack[id] = i
	}
}

// userGroups checks a user's groups and returns the valid ones, once each.
func (b *builder) userGroups(where string, groups []string, gn *yaml.Node) []string {
	var valid []string
	for j, g := range groups {
		line := lineOf(seqItem(gn, j))
		name, prefixed := strings.CutPrefix(g, GroupPrefix)
		switch msg := badName(g); {
		case prefixed && badName(name) == "":
			b.ps.add(line, "%s: groups: write %q, not %q", where, name, g)
		case msg != "":
			b.ps.add(line, "%s: groups: %q: %s", where, g, msg)
		case slices.Contains(valid, g):
			b.ps.add(line, "%s: groups: %q is listed twice", where, g)
		case b.declared && b.d.groups[g] == nil:
			b.ps.add(line, "%s: groups: %q is not declared under groups: (a typo?)", where, g)
		default:
			valid = append(valid, g)
		}
	}
	return valid
}

// token checks one token of users[i] (userID), given the user's tokens so
// far, indexes its hash, and returns it.
func (b *builder) token(i int, where, userID string, ts tokenSpec, have []Token, tnode *yaml.Node) Token {
	t := Token{Name: cmp.Or(ts.Name, userID), SHA256: strings.ToLower(ts.SHA256)}
	if ts.Name != "" {
		if msg := badName(ts.Name); msg != "" {
			b.ps.add(fieldLine(tnode, "name"), "%s: name %q: %s", where, ts.Name, msg)
		}
	}
	if slices.ContainsFunc(have, func(o Token) bool { return o.Name == t.Name }) {
		b.ps.add(fieldLine(tnode, "name"), "%s: name %q is used by another token of %s (name each token)", where, t.Name, userID)
	}
	raw, err := hex.DecodeString(ts.SHA256)
	if err != nil || len(raw) != sha256.Size {
		b.ps.add(fieldLine(tnode, "sha256"), "%s: sha256 must be 64 hex characters, the SHA-256 of the token ('countersign token new' prints it)", where)
	} else {
		h := [sha256.Size]byte(raw)
		if other, dup := b.hashes[h]; dup {
			b.ps.add(fieldLine(tnode, "sha256"), "%s: sha256 is the same as %s's", where, other)
		} else {
			b.hashes[h] = where
			b.d.tokens = append(b.d.tokens, tokenEntry{hash: h, user: i, have: len(have)})
		}
	}
	if len(ts.Roles) == 0 {
		b.ps.add(fieldLine(tnode, "roles"), "%s: roles must list at least one of agent, approver, admin, viewer, auditor", where)
	}
	for k, r := range ts.Roles {
		switch {
		case !slices.Contains(Roles, r):
			b.ps.add(lineOf(seqItem(mapValue(tnode, "roles"), k)), "%s: unknown role %q (agent, approver, admin, viewer, auditor)", where, r)
		case !slices.Contains(t.Roles, r):
			t.Roles = append(t.Roles, r)
		}
	}
	return t
}

// members fills every group's members from the users, adding groups that
// were not declared, and sorts the group names.
func (b *builder) members() {
	d := b.d
	for _, u := range d.users {
		for _, g := range u.Groups {
			grp := d.groups[g]
			if grp == nil {
				grp = &Group{Name: g}
				d.groups[g] = grp
			}
			if !slices.Contains(grp.Members, u.ID) {
				grp.Members = append(grp.Members, u.ID)
			}
		}
	}
	for n := range d.groups {
		d.names = append(d.names, n)
	}
	slices.Sort(d.names)
}

// badID says what is wrong with a user id, or "".
func badID(id string) string {
	if strings.HasPrefix(id, GroupPrefix) {
		return `must not start with "group:" (that names a group)`
	}
	return badName(id)
}

// badName says what is wrong with an id or name, or "".
func badName(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > maxID:
		return fmt.Sprintf("is longer than %d bytes", maxID)
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "contains spaces or control characters"
	case strings.HasPrefix(s, GroupPrefix):
		return `must not start with "group:"`
	}
	return ""
}

// slackID reports whether s looks like a Slack user id: U or W, then
// upper-case letters and digits.
func slackID(s string) bool {
	if len(s) < 3 || len(s) > 32 || s[0] != 'U' && s[0] != 'W' {
		return false
	}
	for _, r := range s[1:] {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Node helpers: positions for problems found after decoding.

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func keyLine(n *yaml.Node, key string) int {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return 0
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return 0
}

func seqItem(n *yaml.Node, i int) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
		return nil
	}
	return n.Content[i]
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

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
	Groups      []string    `yaml:"groups"`
	Tokens      []tokenSpec `yaml:"tokens"`
	Tenants     []string    `yaml:"tenants"`
}

type tokenSpec struct {
	Name   string   `yaml:"name"`
	SHA256 string   `yaml:"sha256"`
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
	d := &Directory{
		byID: map[string]int{}, bySlack: map[string]int{}, byEmail: map[string]int{},
		groups: map[string]*Group{},
	}
	groupsNode := mapValue(root, "groups")
	declared := spec.Groups != nil
	for name, g := range spec.Groups {
		line := keyLine(groupsNode, name)
		if msg := badName(name); msg != "" {
			ps.add(line, "groups: %q: %s", name, msg)
			continue
		}
		grp := &Group{Name: name}
		if g != nil {
			grp.Description = g.Description
		}
		d.groups[name] = grp
	}
	usersNode := mapValue(root, "users")
	hashes := map[[sha256.Size]byte]string{}
	for i, us := range *spec.Users {
		un := seqItem(usersNode, i)
		where := fmt.Sprintf("users[%d]", i)
		at := func(field string) int {
			if n := mapValue(un, field); n != nil {
				return n.Line
			}
			return lineOf(un)
		}
		u := User{ID: us.ID, Name: us.Name, Email: us.Email, SlackUserID: us.SlackUserID}
		switch msg := badID(us.ID); {
		case us.ID == "":
			ps.add(lineOf(un), "%s: id is required", where)
		case msg != "":
			ps.add(at("id"), "%s: id %q: %s", where, us.ID, msg)
		default:
			where = fmt.Sprintf("users[%d] (%s)", i, us.ID)
			if j, dup := d.byID[us.ID]; dup {
				ps.add(at("id"), "%s: id %q is also the id of users[%d]", where, us.ID, j)
			}
		}
		if us.Email != "" {
			a, err := mail.ParseAddress(us.Email)
			switch key := strings.ToLower(us.Email); {
			case err != nil || a.Address != us.Email:
				ps.add(at("email"), "%s: email %q is not a bare address like alice@example.com", where, us.Email)
			default:
				if j, dup := d.byEmail[key]; dup {
					ps.add(at("email"), "%s: email %q is also the email of users[%d]", where, us.Email, j)
				} else {
					d.byEmail[key] = i
				}
			}
		}
		if us.SlackUserID != "" {
			if !slackID(us.SlackUserID) {
				ps.add(at("slack_user_id"), "%s: slack_user_id %q is not a Slack user id (U or W, then upper-case letters and digits)", where, us.SlackUserID)
			} else if j, dup := d.bySlack[us.SlackUserID]; dup {
				ps.add(at("slack_user_id"), "%s: slack_user_id %q is also the Slack user id of users[%d]", where, us.SlackUserID, j)
			} else {
				d.bySlack[us.SlackUserID] = i
			}
		}
		gn := mapValue(un, "groups")
		for j, g := range us.Groups {
			line := lineOf(seqItem(gn, j))
			name, prefixed := strings.CutPrefix(g, GroupPrefix)
			switch msg := badName(g); {
			case prefixed && badName(name) == "":
				ps.add(line, "%s: groups: write %q, not %q", where, name, g)
			case msg != "":
				ps.add(line, "%s: groups: %q: %s", where, g, msg)
			case slices.Contains(u.Groups, g):
				ps.add(line, "%s: groups: %q is listed twice", where, g)
			case declared && d.groups[g] == nil:
				ps.add(line, "%s: groups: %q is not declared under groups: (a typo?)", where, g)
			default:
				u.Groups = append(u.Groups, g)
			}
		}
		tn := mapValue(un, "tokens")
		for j, ts := range us.Tokens {
			tnode := seqItem(tn, j)
			twhere := fmt.Sprintf("%s: tokens[%d]", where, j)
			tat := func(field string) int {
				if n := mapValue(tnode, field); n != nil {
					return n.Line
				}
				return lineOf(tnode)
			}
			t := Token{Name: cmp.Or(ts.Name, us.ID), SHA256: strings.ToLower(ts.SHA256)}
			if ts.Name != "" {
				if msg := badName(ts.Name); msg != "" {
					ps.add(tat("name"), "%s: name %q: %s", twhere, ts.Name, msg)
				}
			}
			if slices.ContainsFunc(u.Tokens, func(o Token) bool { return o.Name == t.Name }) {
				ps.add(tat("name"), "%s: name %q is used by another token of %s (name each token)", twhere, t.Name, us.ID)
			}
			b, err := hex.DecodeString(ts.SHA256)
			if err != nil || len(b) != sha256.Size {
				ps.add(tat("sha256"), "%s: sha256 must be 64 hex characters, the SHA-256 of the token ('countersign token new' prints it)", twhere)
			} else {
				h := [sha256.Size]byte(b)
				if other, dup := hashes[h]; dup {
					ps.add(tat("sha256"), "%s: sha256 is the same as %s's", twhere, other)
				} else {
					hashes[h] = twhere
					d.tokens = append(d.tokens, tokenEntry{hash: h, user: i, have: len(u.Tokens)})
				}
			}
			if len(ts.Roles) == 0 {
				ps.add(tat("roles"), "%s: roles must list at least one of agent, approver, admin", twhere)
			}
			for k, r := range ts.Roles {
				switch {
				case !slices.Contains(Roles, r):
					ps.add(lineOf(seqItem(mapValue(tnode, "roles"), k)), "%s: unknown role %q (agent, approver, admin)", twhere, r)
				case !slices.Contains(t.Roles, r):
					t.Roles = append(t.Roles, r)
				}
			}
			u.Tokens = append(u.Tokens, t)
		}
		if _, dup := d.byID[us.ID]; !dup && us.ID != "" {
			d.byID[us.ID] = i
		}
		d.users = append(d.users, u)
	}
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
	return d
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

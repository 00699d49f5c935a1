package directory

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/mail"
	"slices"
	"strings"
)

// Roles a token can hold. An admin may do everything.
const (
	RoleAgent    = "agent"
	RoleApprover = "approver"
	RoleAdmin    = "admin"
	// RoleViewer and RoleAuditor read the requests within their token's
	// scope (tenants, agents) and decide none; the two differ in name only,
	// so that a directory says why someone reads.
	RoleViewer  = "viewer"
	RoleAuditor = "auditor"
)

// Roles lists every role a token can hold.
var Roles = []string{RoleAgent, RoleApprover, RoleAdmin, RoleViewer, RoleAuditor}

// GroupPrefix marks an approver entry that names a group: "group:finance".
const GroupPrefix = "group:"

// User is one person (or service) in the directory.
type User struct {
	// ID is the approver id: what votes, records and policies name.
	ID   string
	Name string
	// Email is as written in the file; ByEmail matches it case-insensitively.
	Email       string
	SlackUserID string
	// OIDCSubject is the subject (the sub claim) the inbox's OpenID
	// Connect provider gives this person; a sign-in with that subject is
	// this user.
	OIDCSubject string
	// Groups the user belongs to, in file order.
	Groups []string
	// Tokens are the user's API tokens (hashes only).
	Tokens []Token
	// Tenants limits everything the user reads and decides to these
	// tenants; empty means no limit.
	Tenants []string
	// Quiet, when set, is the user's daily quiet hours (quiet_hours:
	// "22:00-07:00 Europe/Berlin"), in which their non-critical pushes
	// are held.
	Quiet *QuietHours
}

// Token is one bearer token of a user. Only its hash is kept.
type Token struct {
	// Name identifies the token in logs; it defaults to the user id.
	Name string
	// SHA256 is the lowercase hex SHA-256 of the bearer token.
	SHA256 string
	// Roles held by the token: agent, approver, admin, viewer, auditor.
	Roles []string
	// Tenants narrows the user's tenants for this token (empty: the user's).
	Tenants []string
	// Agents limits a viewer or auditor token to agents matching these
	// patterns ("billing-*"), and an agent token to submitting as them;
	// empty means every agent.
	Agents []string
}

// Group is a named set of users.
type Group struct {
	Name        string
	Description string
	// Members are user ids, in file order.
	Members []string
}

// Source gives the directory in force; it may change at any time.
type Source interface {
	Current() *Directory
}

// Static is a Source that never changes.
type Static struct{ D *Directory }

// Current returns the directory.
func (s Static) Current() *Directory { return s.D }

// Directory is a parsed directory. It is immutable and safe for concurrent
// use; every method also works on a nil *Directory, which is empty.
type Directory struct {
	sum     [sha256.Size]byte
	users   []User
	byID    map[string]int
	bySlack map[string]int
	byEmail map[string]int
	bySub   map[string]int
	groups  map[string]*Group
	names   []string // group names, sorted
	tokens  []tokenEntry
}

type tokenEntry struct {
	hash       [sha256.Size]byte
	user, have int // indexes into users and users[user].Tokens
}

// SHA256 is the hex SHA-256 of the file the directory was parsed from.
func (d *Directory) SHA256() string {
	if d == nil {
		return ""
	}
	return hex.EncodeToString(d.sum[:])
}

// Len is the number of users.
func (d *Directory) Len() int {
	if d == nil {
		return 0
	}
	return len(d.users)
}

// Users returns every user, in file order.
func (d *Directory) Users() []User {
	if d == nil {
		return nil
	}
	out := make([]User, len(d.users))
	for i := range d.users {
		out[i] = cloneUser(&d.users[i])
	}
	return out
}

// User returns the user with the id.
func (d *Directory) User(id string) (User, bool) {
	if d == nil {
		return User{}, false
	}
	return d.lookup(d.byID, id)
}

// BySlackID returns the user whose Slack user id is id.
func (d *Directory) BySlackID(id string) (User, bool) {
	if d == nil || id == "" {
		return User{}, false
	}
	return d.lookup(d.bySlack, id)
}

// ByOIDCSubject returns the user whose oidc_subject is sub, compared
// exactly (a provider's subjects are case-sensitive).
func (d *Directory) ByOIDCSubject(sub string) (User, bool) {
	if d == nil || sub == "" {
		return User{}, false
	}
	return d.lookup(d.bySub, sub)
}

// ByEmail returns the user with the email address, compared
// case-insensitively. addr may be a bare address or a full one
// ("Alice <alice@example.com>").
func (d *Directory) ByEmail(addr string) (User, bool) {
	if d == nil {
		return User{}, false
	}
	key := emailKey(addr)
	if key == "" {
		return User{}, false
	}
	return d.lookup(d.byEmail, key)
}

func (d *Directory) lookup(m map[string]int, key string) (User, bool) {
	i, ok := m[key]
	if !ok {
		return User{}, false
	}
	return cloneUser(&d.users[i]), true
}

// HasGroup reports whether the directory knows the group (name with or
// without the "group:" prefix), members or not.
func (d *Directory) HasGroup(name string) bool {
	if d == nil {
		return false
	}
	_, ok := d.groups[strings.TrimPrefix(name, GroupPrefix)]
	return ok
}

// Members returns the ids of the group's members in file order (name with
// or without the "group:" prefix), or nil for an unknown group.
func (d *Directory) Members(group string) []string {
	if d == nil {
		return nil
	}
	g, ok := d.groups[strings.TrimPrefix(group, GroupPrefix)]
	if !ok {
		return nil
	}
	return slices.Clone(g.Members)
}

// Groups returns every group, sorted by name: those declared under groups:
// and those only named by users.
func (d *Directory) Groups() []Group {
	if d == nil {
		return nil
	}
	out := make([]Group, 0, len(d.names))
	for _, n := range d.names {
		g := *d.groups[n]
		g.Members = slices.Clone(g.Members)
		out = append(out, g)
	}
	return out
}

// ResolveApprovers expands an approver list: each "group:NAME" entry is
// replaced by the group's members; user ids are kept as they are (they may
// authenticate other ways than the directory). Order is kept and repeats
// are dropped.
//
// A group the directory does not know, or that has no members, stays in ids
// as written — nobody's id, so a request with it fails closed instead of
// being open to everyone — and is listed in unknown.
func (d *Directory) ResolveApprovers(entries []string) (ids []string, unknown []string) {
	ids = make([]string, 0, len(entries))
	seen := make(map[string]bool, len(entries))
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, e := range entries {
		name, isGroup := strings.CutPrefix(e, GroupPrefix)
		if !isGroup {
			add(e)
			continue
		}
		var members []string
		if d != nil {
			if g, ok := d.groups[name]; ok {
				members = g.Members
			}
		}
		if len(members) == 0 {
			if !slices.Contains(unknown, e) {
				unknown = append(unknown, e)
			}
			add(e)
			continue
		}
		for _, m := range members {
			add(m)
		}
	}
	return ids, unknown
}

// Authenticate finds the user and token of a bearer token. The token is
// hashed and compared with every stored hash in constant time, whether or
// not one matched earlier, so the time taken does not tell which token (or
// whether any) matched.
func (d *Directory) Authenticate(bearer string) (User, Token, bool) {
	if d == nil || bearer == "" {
		return User{}, Token{}, false
	}
	return d.AuthenticateSum(sha256.Sum256([]byte(bearer)))
}

// AuthenticateSum is Authenticate for a token known by its SHA-256 only (a
// signed-in session keeps the hash, never the token), with the same
// constant-time search.
func (d *Directory) AuthenticateSum(sum [sha256.Size]byte) (User, Token, bool) {
	if d == nil {
		return User{}, Token{}, false
	}
	found := -1
	for i := range d.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], d.tokens[i].hash[:])
		// found = i on the first match, unchanged otherwise, without a branch on eq.
		first := eq & subtle.ConstantTimeEq(int32(found), -1)
		found = subtle.ConstantTimeSelect(first, i, found)
	}
	if found < 0 {
		return User{}, Token{}, false
	}
	e := d.tokens[found]
	u := &d.users[e.user]
	t := u.Tokens[e.have]
	t.Roles, t.Tenants, t.Agents = slices.Clone(t.Roles), slices.Clone(t.Tenants), slices.Clone(t.Agents)
	return cloneUser(u), t, true
}

func cloneUser(u *User) User {
	c := *u
	c.Groups = slices.Clone(u.Groups)
	c.Tenants = slices.Clone(u.Tenants)
	c.Tokens = make([]Token, len(u.Tokens))
	for i, t := range u.Tokens {
		t.Roles, t.Tenants, t.Agents = slices.Clone(t.Roles), slices.Clone(t.Tenants), slices.Clone(t.Agents)
		c.Tokens[i] = t
	}
	return c
}

// emailKey is the lookup key of an address: the bare address, lower-cased.
func emailKey(addr string) string {
	addr = strings.TrimSpace(addr)
	if a, err := mail.ParseAddress(addr); err == nil {
		addr = a.Address
	}
	return strings.ToLower(addr)
}

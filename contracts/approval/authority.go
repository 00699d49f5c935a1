package approval

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/countersign/countersign/contracts"
)

// This file is authority: what someone may do to an approval comes from
// the live directory (a Roster) and the record, never from what a vote or
// command says of its sender. A surface vouches for who sent it; the rules
// here decide what that person may do, for the arbiter and every surface
// alike.

// Canonical is the form in which identities are compared: Unicode NFKC,
// case-folded, without format characters (zero-width joiners and spaces,
// byte order marks) and surrounding space. "Alice", "alice ", full-width
// "ａｌｉｃｅ" and "ali\u200dce" are all "alice".
func Canonical(s string) string {
	s = norm.NFKC.String(s)
	s = strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(cases.Fold().String(s))
}

// Roster is the live directory as the arbiter consults it when it applies
// a vote, a command or a request. A nil *Roster is no directory at all (a
// deployment without the API, or a test): the record alone then says who
// may decide, as before the directory was published.
type Roster struct {
	people  []contracts.DirectoryPerson
	byKey   map[string]int      // canonical id and email → index
	members map[string][]string // group → member ids, in directory order
	version string
}

// ParseRoster reads a directory document as the API role publishes it
// (contracts.DirectoryKey) and indexes it; a document that is not JSON or
// not countersign.directory/v1 is an error, never an empty roster.
func ParseRoster(data []byte) (*Roster, error) {
	var doc contracts.Directory
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("the directory is unreadable: %w", err)
	}
	if doc.Spec != contracts.SpecDirectory {
		return nil, fmt.Errorf("the directory's spec is %q, want %q", doc.Spec, contracts.SpecDirectory)
	}
	return NewRoster(doc), nil
}

// NewRoster indexes a directory document. An identity whose canonical id
// or email another one already claimed is left out, and so cannot act: two
// people who compare equal could otherwise stand in for each other.
func NewRoster(doc contracts.Directory) *Roster {
	r := &Roster{byKey: map[string]int{}, members: map[string][]string{}, version: doc.Version}
	clash := map[string]bool{}
	for _, p := range doc.People {
		for _, k := range personKeys(p) {
			if _, dup := r.byKey[k]; dup {
				clash[k] = true
			}
			r.byKey[k] = -1
		}
	}
	for _, p := range doc.People {
		keys := personKeys(p)
		if p.ID == "" || slices.ContainsFunc(keys, func(k string) bool { return clash[k] }) {
			continue
		}
		i := len(r.people)
		r.people = append(r.people, p)
		for _, k := range keys {
			r.byKey[k] = i
		}
		for _, g := range p.Groups {
			r.members[strings.TrimPrefix(g, groupPrefix)] = append(r.members[strings.TrimPrefix(g, groupPrefix)], p.ID)
		}
	}
	for k, i := range r.byKey {
		if i < 0 {
			delete(r.byKey, k)
		}
	}
	return r
}

const groupPrefix = "group:"

func personKeys(p contracts.DirectoryPerson) []string {
	keys := []string{Canonical(p.ID)}
	if p.Email != "" {
		if e := Canonical(p.Email); e != keys[0] {
			keys = append(keys, e)
		}
	}
	return keys
}

// Version is the directory's version ("" for no directory).
func (r *Roster) Version() string {
	if r == nil {
		return ""
	}
	return r.version
}

// Find returns the person whose id or email is name, compared canonically.
func (r *Roster) Find(name string) (contracts.DirectoryPerson, bool) {
	if r == nil {
		return contracts.DirectoryPerson{}, false
	}
	i, ok := r.byKey[Canonical(name)]
	if !ok {
		return contracts.DirectoryPerson{}, false
	}
	return r.people[i], true
}

// Members returns the ids of a group's members ("group:" prefix or not);
// nil for a group nobody belongs to.
func (r *Roster) Members(group string) []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members[strings.TrimPrefix(group, groupPrefix)])
}

// Issuer is who sent a vote or command, as the directory knows them at the
// moment it is applied.
type Issuer struct {
	// ID is the directory's id for them, or the name as sent when the
	// directory does not list them.
	ID string
	// Listed reports whether the directory lists them. Without a
	// directory (a nil Roster) everyone counts as listed.
	Listed bool
	// Admin: one of their tokens holds the admin role.
	Admin bool
	// Tenants limits what they decide and manage; empty: no limit.
	Tenants []string
	// Development marks the development principal (see
	// contracts.DirectoryPerson.Development).
	Development bool
	// directory reports that a directory was consulted.
	directory bool
}

// Issuer looks up who name is.
func (r *Roster) Issuer(name string) Issuer {
	if r == nil {
		return Issuer{ID: name, Listed: true}
	}
	p, ok := r.Find(name)
	if !ok {
		return Issuer{ID: name, directory: true}
	}
	return Issuer{
		ID: p.ID, Listed: true, Admin: slices.Contains(p.Roles, "admin"), Tenants: p.Tenants,
		Development: p.Development, directory: true,
	}
}

// Same reports whether a and b name the same identity: the same person of
// the directory, or, where it lists neither, the same canonical name.
func (r *Roster) Same(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if pa, ok := r.Find(a); ok {
		a = pa.ID
	}
	if pb, ok := r.Find(b); ok {
		b = pb.ID
	}
	return Canonical(a) == Canonical(b)
}

// IsRequester reports whether id asked for rec's call, for the
// self-approval rule: it is the run's requester or owner, or the principal
// whose token submitted it (a person's own agent token makes them the
// requester) — except the development principal, who plays every part on
// one machine.
func IsRequester(r *Roster, rec *contracts.Record, id string) bool {
	run := &rec.Request.Run
	if r.Same(id, run.RequestedBy) || r.Same(id, run.Owner) {
		return true
	}
	if sub := rec.Request.Submitter; sub != "" && r.Same(id, sub) {
		p, ok := r.Find(sub)
		return !(ok && p.Development)
	}
	return false
}

// voterRefusal is why the directory does not let v's approver vote on rec:
// they are not listed (any more), or rec belongs to a tenant outside
// theirs; "" when it lets them. v's approver id is the directory's.
func voterRefusal(rec *contracts.Record, who Issuer) string {
	if !who.Listed {
		return contracts.ReasonUnknownApprover
	}
	if !InTenants(rec.Request.Run.Tenant, who.Tenants) {
		return contracts.ReasonWrongTenant
	}
	return ""
}

// IsSubmitter reports whether by is the agent principal that submitted
// rec: its submitter when the HTTP API took it, else (a library gate
// published it) the run's agent.
func IsSubmitter(r *Roster, rec *contracts.Record, by string) bool {
	if sub := rec.Request.Submitter; sub != "" {
		return r.Same(by, sub)
	}
	return by != "" && by == rec.Request.Run.Agent
}

// CommandRefusal is why issuer may not give command on rec, or "":
//   - extend: an admin, or an approver of the request (escalation tiers
//     reached included);
//   - cancel: those, and the requester, the run's owner and the agent that
//     submitted it;
//   - claim: the agent that submitted it, or an admin.
//
// An admin or approver must be listed in the directory and within the
// request's tenant; a requester or submitting agent is recognized by the
// record itself.
func CommandRefusal(r *Roster, rec *contracts.Record, command string, who Issuer) string {
	tenant := rec.Request.Run.Tenant
	admin := who.Listed && who.Admin && InTenants(tenant, who.Tenants)
	approver := who.Listed && InTenants(tenant, who.Tenants) && IsApprover(rec, who.ID)
	switch command {
	case contracts.CommandExtend:
		if admin || approver {
			return ""
		}
	case contracts.CommandCancel:
		run := &rec.Request.Run
		if admin || approver || r.Same(who.ID, run.RequestedBy) || r.Same(who.ID, run.Owner) || IsSubmitter(r, rec, who.ID) {
			return ""
		}
	case contracts.CommandClaim:
		if admin || IsSubmitter(r, rec, who.ID) {
			return ""
		}
	default:
		return ""
	}
	if who.directory && !who.Listed && command != contracts.CommandClaim {
		return contracts.ReasonUnknownApprover
	}
	return contracts.ReasonNotPermitted
}

// ClaimWithin is how long after its decision rec may be claimed.
func ClaimWithin(req *contracts.ApprovalRequested) time.Duration {
	if d, err := time.ParseDuration(req.ClaimWithin); err == nil && d > 0 {
		return d
	}
	return contracts.DefaultClaimWithin
}

// Lapsed reports whether rec is an approval that was not claimed in time:
// approved, unclaimed, and either marked lapsed or decided more than its
// claim_within before now.
func Lapsed(rec *contracts.Record, now time.Time) bool {
	if rec.Status != contracts.StatusApproved || rec.Claim != nil {
		return false
	}
	if rec.LapsedAt != nil {
		return true
	}
	return rec.Outcome != nil && !rec.Outcome.DecidedAt.IsZero() &&
		now.After(rec.Outcome.DecidedAt.Add(ClaimWithin(&rec.Request)))
}

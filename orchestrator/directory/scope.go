package directory

import (
	"fmt"
	"path"
	"slices"

	"go.yaml.in/yaml/v3"
)

// scopes checks and sets the tenants of users and the tenants and agents
// of their tokens. build has made one User per users entry and one Token
// per tokens entry, in file order.
func scopes(spec *fileSpec, root *yaml.Node, d *Directory, ps *problems) {
	usersNode := mapValue(root, "users")
	for i, us := range *spec.Users {
		un := seqItem(usersNode, i)
		where := fmt.Sprintf("users[%d] (%s)", i, us.ID)
		u := &d.users[i]
		u.Tenants = scopeList(ps, un, "tenants", where, us.Tenants, badTenant)
		tn := mapValue(un, "tokens")
		for j, ts := range us.Tokens {
			tnode := seqItem(tn, j)
			twhere := fmt.Sprintf("%s: tokens[%d]", where, j)
			t := &u.Tokens[j]
			t.Tenants = scopeList(ps, tnode, "tenants", twhere, ts.Tenants, badTenant)
			for _, tenant := range t.Tenants {
				if len(u.Tenants) > 0 && !slices.Contains(u.Tenants, tenant) {
					ps.add(lineOf(mapValue(tnode, "tenants")), "%s: tenants: %q is not one of the user's tenants (%v); a token narrows its user's tenants, never widens them", twhere, tenant, u.Tenants)
				}
			}
			if len(t.Tenants) == 0 {
				t.Tenants = slices.Clone(u.Tenants)
			}
			t.Agents = scopeList(ps, tnode, "agents", twhere, ts.Agents, badAgentPattern)
		}
	}
}

// scopeList checks the entries of a tenants or agents list with bad, which
// says what is wrong with an entry or returns "".
func scopeList(ps *problems, node *yaml.Node, field, where string, list []string, bad func(string) string) []string {
	ln := mapValue(node, field)
	var out []string
	for k, v := range list {
		switch msg := bad(v); {
		case msg != "":
			ps.add(lineOf(seqItem(ln, k)), "%s: %s: %q: %s", where, field, v, msg)
		case slices.Contains(out, v):
			ps.add(lineOf(seqItem(ln, k)), "%s: %s: %q is listed twice", where, field, v)
		default:
			out = append(out, v)
		}
	}
	return out
}

func badTenant(t string) string {
	if t == "" {
		return "a tenant must not be empty"
	}
	if len(t) > maxID {
		return fmt.Sprintf("a tenant is at most %d bytes", maxID)
	}
	return ""
}

func badAgentPattern(p string) string {
	if p == "" {
		return "an agent pattern must not be empty"
	}
	if _, err := path.Match(p, ""); err != nil {
		return "not a valid pattern (write agent ids, with * for any characters: billing-*)"
	}
	return ""
}

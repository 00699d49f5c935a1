package policy

// Lint checks a policy file and returns every problem, sorted by position:
// each error Parse would refuse the file for, and warnings about what parses
// but is probably a mistake — rules no call can reach because an earlier
// rule without a condition matches everything they match, approver groups
// the policy does not define, settings that have no effect, a default that
// allows.
func Lint(data []byte) []Problem {
	_, ps := compile(data)
	out := []Problem(ps)
	sortProblems(out)
	return out
}

// WithoutGroupsOf drops the warnings about approver groups the policy does
// not define for the groups defined reports true: the orchestrator resolves
// such a group from the approver directory when it creates a request, so a
// group the directory gives members is not unknown.
func WithoutGroupsOf(ps []Problem, defined func(group string) bool) []Problem {
	out := make([]Problem, 0, len(ps))
	for _, p := range ps {
		if p.Group != "" && defined(p.Group) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// shadowWarnings warns about every rule that an earlier unconditional
// enforcing rule shadows (a shadow rule decides nothing, so it hides no
// rule below it; a shadow rule hidden so never records).
func shadowWarnings(rules []*ruleSpec, ps *problems) {
	for j, b := range rules {
		for _, a := range rules[:j] {
			if !a.shadow && shadows(a, b) {
				ps.add(b.line, b.col, SeverityWarning, "%s is unreachable: rule %q (line %d) comes first and matches every call it matches",
					b.where, a.name, a.line)
				break
			}
		}
	}
}

// shadows reports whether rule a matches every call rule b matches.
func shadows(a, b *ruleSpec) bool {
	if a.when != "" {
		return false
	}
	if !globsCover(a.tools, b.tools) || !globsCover(a.agents, b.agents) || !globsCover(a.tenants, b.tenants) {
		return false
	}
	for k, v := range a.labels {
		if bv, ok := b.labels[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// globsCover reports whether the globs as match every name the globs bs
// match; no globs match every name.
func globsCover(as, bs []string) bool {
	if len(as) == 0 {
		return true
	}
	if len(bs) == 0 {
		bs = []string{"*"}
	}
	for _, b := range bs {
		covered := false
		for _, a := range as {
			if covers(a, b) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

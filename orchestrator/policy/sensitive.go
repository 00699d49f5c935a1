package policy

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts/approval"
)

// This file reads `sensitive:`, the argument values a gated request shows
// masked outside Countersign, and merges it across layers.

// readSensitive reads a list of JSON pointer patterns into the arguments:
// RFC 6901 pointers whose segment "*" matches any key or index.
func readSensitive(v *yaml.Node, what string, ps *problems) []string {
	list, nodes := ps.strList(v, what)
	var out []string
	for j, p := range list {
		n := nodes[j]
		if strings.TrimSpace(p) != p {
			ps.add(n.Line, n.Column, SeverityError, "%s[%d]: %q has leading or trailing space", what, j, p)
			continue
		}
		if _, err := approval.ParsePointer(p); err != nil {
			ps.add(n.Line, n.Column, SeverityError, "%s[%d]: %q is not a JSON pointer into the arguments, such as /ssn, /card/number or /items/*/iban (%v)",
				what, j, p, err)
			continue
		}
		if slices.Contains(out, p) {
			ps.add(n.Line, n.Column, SeverityError, "%s[%d]: %q is listed twice", what, j, p)
			continue
		}
		out = append(out, p)
	}
	return out
}

// fieldMatchersOf is every sensitive_fields expression the layers set.
func fieldMatchersOf(layers ...*gateSpec) []*fieldMatcher {
	var out []*fieldMatcher
	for _, g := range layers {
		if g != nil && g.sensitiveFields != nil {
			out = append(out, g.sensitiveFields)
		}
	}
	return out
}

// sensitiveOf is every pattern the layers name, in order, without repeats:
// unlike other settings, a layer adds to what another hides and can never
// show what it hides.
func sensitiveOf(layers ...*gateSpec) []string {
	var out []string
	for _, g := range layers {
		if g == nil {
			continue
		}
		for _, p := range g.sensitive {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

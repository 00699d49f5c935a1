package policy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// This file reads YAML node by node instead of decoding into structs, so
// that every problem carries the line and column of the value at fault and
// reading goes on after the first one.

// readDocument parses data as exactly one YAML document and returns its
// root node, or nil after recording why not. what names the file's content
// for the empty-file message.
func readDocument(data []byte, ps *problems, emptyHint string) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root *yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*ps = append(*ps, yamlProblem(err, data))
			return nil
		}
		if emptyDocument(&doc) {
			continue
		}
		if root != nil {
			ps.add(doc.Line, 0, SeverityError, "a second YAML document; the file must hold one document")
			return nil
		}
		root = &doc
	}
	if root == nil {
		ps.add(0, 0, SeverityError, "the file is empty (%s)", emptyHint)
		return nil
	}
	return root.Content[0]
}

// syntaxError is the first error of decoding every document of data.
func syntaxError(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// problemLine finds the line of a syntax error the YAML parser reported on
// line reported with message msg. The parser names the line where the
// enclosing block began (the top-level mapping on line 3, say) rather than
// the line at fault, for errors such as "did not find expected key". The
// line at fault is the first one whose text, with every line before it,
// fails with the same message: shorter prefixes lack the offending token
// and either parse or fail otherwise (an unfinished block ends cleanly at
// a line break). The prefixes that fail so are the ones that reach that
// line, so a binary search finds it.
func problemLine(data []byte, reported int, msg string) int {
	var ends []int // ends[i]: the offset just after line i+1
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	sameFailure := func(lines int) bool {
		err := syntaxError(data[:ends[lines-1]])
		if err == nil {
			return false
		}
		m := yamlErrLine.FindStringSubmatch(err.Error())
		return m != nil && m[2] == msg
	}
	lo, hi := max(reported, 1), len(ends) // the answer is in [lo, hi]
	if lo > hi || !sameFailure(hi) {
		return reported
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if sameFailure(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// emptyDocument reports whether doc holds nothing but comments or null.
func emptyDocument(doc *yaml.Node) bool {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// field is one key and value of a mapping; val is not resolved, so that its
// position is where it is used.
type field struct {
	key, val *yaml.Node
}

func (f field) name() string { return f.key.Value }

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// fields returns the pairs of the mapping n, with merge keys (<<) expanded
// and keys given twice refused. It records an error and returns nil when n
// is not a mapping.
func (ps *problems) fields(n *yaml.Node, what string) []field {
	m := resolve(n)
	if m == nil || m.Kind != yaml.MappingNode {
		if !isNull(n) {
			ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping of names to values", what)
		}
		return nil
	}
	var out []field
	seen := map[string]*yaml.Node{}
	for _, f := range ps.pairs(m, what, 0) {
		if first, dup := seen[f.key.Value]; dup {
			if f.key != first {
				ps.add(f.key.Line, f.key.Column, SeverityError, "%s: %q is set twice (first on line %d)", what, f.key.Value, first.Line)
			}
			continue
		}
		seen[f.key.Value] = f.key
		out = append(out, f)
	}
	return out
}

// pairs lists the keys of m in order, explicit ones first, then merged ones
// (fields drops a merged key the mapping sets itself).
func (ps *problems) pairs(m *yaml.Node, what string, depth int) []field {
	var own, merged []field
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		rk := resolve(k)
		if rk.Tag == "!!merge" {
			if depth > 8 {
				ps.add(k.Line, k.Column, SeverityError, "%s: merge keys nested too deeply", what)
				continue
			}
			for _, src := range mergeSources(v) {
				if src.Kind != yaml.MappingNode {
					ps.add(v.Line, v.Column, SeverityError, "%s: << must merge a mapping", what)
					continue
				}
				for _, f := range ps.pairs(src, what, depth+1) {
					if !hasKey(own, f.key.Value) && !hasKey(merged, f.key.Value) {
						merged = append(merged, f)
					}
				}
			}
			continue
		}
		if rk.Kind != yaml.ScalarNode || rk.Tag == "!!null" {
			ps.add(k.Line, k.Column, SeverityError, "%s: keys must be names", what)
			continue
		}
		own = append(own, field{key: rk, val: v})
	}
	var out []field
	out = append(out, own...)
	for _, f := range merged {
		if !hasKey(own, f.key.Value) {
			out = append(out, f)
		}
	}
	return out
}

func hasKey(fs []field, k string) bool {
	for _, f := range fs {
		if f.key.Value == k {
			return true
		}
	}
	return false
}

func mergeSources(v *yaml.Node) []*yaml.Node {
	r := resolve(v)
	if r.Kind == yaml.SequenceNode {
		out := make([]*yaml.Node, 0, len(r.Content))
		for _, c := range r.Content {
			out = append(out, resolve(c))
		}
		return out
	}
	return []*yaml.Node{r}
}

// str reads a scalar as a string; null is "".
func (ps *problems) str(n *yaml.Node, what string) string {
	r := resolve(n)
	if isNull(r) {
		return ""
	}
	if r.Kind != yaml.ScalarNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a string", what)
		return ""
	}
	if !utf8.ValidString(r.Value) {
		ps.add(n.Line, n.Column, SeverityError, "%s is not valid UTF-8", what)
		return ""
	}
	return r.Value
}

// strList reads a list of non-empty strings and the node of each item.
func (ps *problems) strList(n *yaml.Node, what string) ([]string, []*yaml.Node) {
	r := resolve(n)
	if isNull(r) {
		return nil, nil
	}
	if r.Kind != yaml.SequenceNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a list of strings, such as [a, b]", what)
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for i, c := range r.Content {
		item := what + "[" + itoa(i) + "]"
		rc := resolve(c)
		if rc.Kind != yaml.ScalarNode {
			ps.add(c.Line, c.Column, SeverityError, "%s must be a string", item)
			continue
		}
		if isNull(rc) || rc.Value == "" {
			ps.add(c.Line, c.Column, SeverityError, "%s is empty", item)
			continue
		}
		if !utf8.ValidString(rc.Value) {
			ps.add(c.Line, c.Column, SeverityError, "%s is not valid UTF-8", item)
			continue
		}
		out = append(out, rc.Value)
		nodes = append(nodes, c)
	}
	return out, nodes
}

// strMap reads a mapping of names to strings.
func (ps *problems) strMap(n *yaml.Node, what string) (map[string]string, []field) {
	fs := ps.fields(n, what)
	if len(fs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(fs))
	var kept []field
	for _, f := range fs {
		r := resolve(f.val)
		if r.Kind != yaml.ScalarNode || isNull(r) {
			ps.add(f.val.Line, f.val.Column, SeverityError, "%s.%s must be a string", what, f.name())
			continue
		}
		m[f.name()] = r.Value
		kept = append(kept, f)
	}
	return m, kept
}

// integer reads a whole number.
func (ps *problems) integer(n *yaml.Node, what string) (int, bool) {
	r := resolve(n)
	var v int
	if r.Kind != yaml.ScalarNode || r.Tag != "!!int" || r.Decode(&v) != nil {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a whole number", what)
		return 0, false
	}
	return v, true
}

// boolean reads true or false.
func (ps *problems) boolean(n *yaml.Node, what string) (bool, bool) {
	r := resolve(n)
	var v bool
	if r.Kind != yaml.ScalarNode || r.Tag != "!!bool" || r.Decode(&v) != nil {
		ps.add(n.Line, n.Column, SeverityError, "%s must be true or false", what)
		return false, false
	}
	return v, true
}

// duration reads a positive Go duration such as "90m" or "4h".
func (ps *problems) duration(n *yaml.Node, what string) (time.Duration, bool) {
	r := resolve(n)
	if r.Kind != yaml.ScalarNode || isNull(r) {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a duration such as \"90m\" or \"4h\"", what)
		return 0, false
	}
	d, err := time.ParseDuration(r.Value)
	if err != nil {
		ps.add(n.Line, n.Column, SeverityError, "%s: invalid duration %q (want a Go duration such as \"90m\" or \"4h\")", what, r.Value)
		return 0, false
	}
	if d <= 0 {
		ps.add(n.Line, n.Column, SeverityError, "%s: %s must be positive", what, r.Value)
		return 0, false
	}
	return d, true
}

// unknownField records a key that the schema does not have, suggesting the
// closest known one.
func (ps *problems) unknownField(f field, what string, known []string) {
	msg := "unknown field " + quote(f.name()) + " in " + what
	if s := closest(f.name(), known); s != "" {
		msg += "; did you mean " + quote(s) + "?"
	}
	ps.add(f.key.Line, f.key.Column, SeverityError, "%s", msg)
}

// closest returns the known name within two edits of s, if any.
func closest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

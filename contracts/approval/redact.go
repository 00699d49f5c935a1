package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/countersign/countersign/contracts"
)

// This file hides sensitive argument values. A request names them in
// contracts.ApprovalRequested.Sensitive as RFC 6901 JSON pointers into its
// arguments, and its record adds those of the edits (contracts.Record
// Sensitive; RecordSensitive is the union); every surface that shows arguments outside Countersign shows
// Mask in their place. The arguments hash, the diff's paths and the audit
// keep referring to the real values: nothing here recomputes a hash, and a
// redacted value carries no hash at all (a hash of arguments with masked
// values would confirm a guess of them).

// Mask stands in for a sensitive value wherever arguments leave Countersign.
const Mask = "••••"

// Wildcard, as a whole segment of a pattern, matches any key or index.
const Wildcard = "*"

// ErrBadPointer is returned (wrapped) for a pointer that is not RFC 6901:
// not empty and not starting with "/", or with a "~" not followed by 0 or 1.
var ErrBadPointer = errors.New("not a JSON pointer")

// ParsePointer splits an RFC 6901 JSON pointer into its unescaped
// reference tokens; "" (the whole value) has none.
func ParsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%w: %q must start with /", ErrBadPointer, p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("%w: %q: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)", ErrBadPointer, p)
			}
		}
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return tokens, nil
}

// pointerOf joins reference tokens into a pointer.
func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// ExpandPointers returns the concrete pointers into args that patterns
// name, sorted and without repeats: a pattern is a JSON pointer whose
// segment "*" matches any key of an object or index of an array. Patterns
// that name nothing present in args, and patterns that are not pointers,
// give nothing.
func ExpandPointers(args json.RawMessage, patterns []string) []string {
	if len(patterns) == 0 {
		return nil
	}
	v, err := decodeNumbers(args)
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range patterns {
		tokens, err := ParsePointer(p)
		if err != nil {
			continue
		}
		expand(v, nil, tokens, &out)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func expand(v any, at, rest []string, out *[]string) {
	if len(rest) == 0 {
		*out = append(*out, pointerOf(at))
		return
	}
	tok := rest[0]
	switch c := v.(type) {
	case map[string]any:
		if tok == Wildcard {
			for k, child := range c {
				expand(child, append(slices.Clip(at), k), rest[1:], out)
			}
			return
		}
		if child, ok := c[tok]; ok {
			expand(child, append(slices.Clip(at), tok), rest[1:], out)
		}
	case []any:
		if tok == Wildcard {
			for i, child := range c {
				expand(child, append(slices.Clip(at), strconv.Itoa(i)), rest[1:], out)
			}
			return
		}
		if i, ok := arrayIndex(tok, len(c)); ok {
			expand(c[i], append(slices.Clip(at), tok), rest[1:], out)
		}
	}
}

// arrayIndex reads an RFC 6901 array index (no leading zeros) below n.
func arrayIndex(tok string, n int) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// maxSchemaDepth bounds how far SchemaPointers follows a tool schema (and
// its local $refs), so a schema that refers to itself ends.
const maxSchemaDepth = 32

// SchemaPointers returns the pointers into args of the values the tool's
// JSON Schema marks sensitive ("x-sensitive": true or "writeOnly": true),
// sorted and without repeats. It follows properties, additionalProperties,
// patternProperties, items, prefixItems, allOf, anyOf, oneOf and local
// $refs as far as the arguments go; a value that any applicable subschema
// marks is sensitive. An absent or unreadable schema marks nothing.
func SchemaPointers(schema, args json.RawMessage) []string {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil
	}
	var root any
	if json.Unmarshal(schema, &root) != nil {
		return nil
	}
	v, err := decodeNumbers(args)
	if err != nil {
		return nil
	}
	var out []string
	schemaWalk(root, root, v, nil, 0, &out)
	slices.Sort(out)
	return slices.Compact(out)
}

func schemaWalk(root, s, v any, at []string, depth int, out *[]string) {
	m, ok := s.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		return
	}
	if m["x-sensitive"] == true || m["writeOnly"] == true {
		if len(at) > 0 {
			*out = append(*out, pointerOf(at))
		}
		return
	}
	if ref, ok := m["$ref"].(string); ok {
		if target, ok := localRef(root, ref); ok {
			schemaWalk(root, target, v, at, depth+1, out)
		}
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[key].([]any); ok {
			for _, sub := range list {
				schemaWalk(root, sub, v, at, depth+1, out)
			}
		}
	}
	switch c := v.(type) {
	case map[string]any:
		props, _ := m["properties"].(map[string]any)
		patterns, _ := m["patternProperties"].(map[string]any)
		for k, child := range c {
			next := append(slices.Clip(at), k)
			if sub, ok := props[k]; ok {
				schemaWalk(root, sub, child, next, depth+1, out)
				continue
			}
			// A key no property names: every pattern property (matched or
			// not: marking more is the safe side) and additionalProperties.
			for _, sub := range patterns {
				schemaWalk(root, sub, child, next, depth+1, out)
			}
			schemaWalk(root, m["additionalProperties"], child, next, depth+1, out)
		}
	case []any:
		prefix, _ := m["prefixItems"].([]any)
		for i, child := range c {
			next := append(slices.Clip(at), strconv.Itoa(i))
			if i < len(prefix) {
				schemaWalk(root, prefix[i], child, next, depth+1, out)
				continue
			}
			schemaWalk(root, m["items"], child, next, depth+1, out)
		}
	}
}

// localRef resolves a $ref of the form "#" or "#/json/pointer" in root.
func localRef(root any, ref string) (any, bool) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	tokens, err := ParsePointer(frag)
	if err != nil {
		return nil, false
	}
	cur := root
	for _, t := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			if cur, ok = c[t]; !ok {
				return nil, false
			}
		case []any:
			i, ok := arrayIndex(t, len(c))
			if !ok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// SensitivePointers is what a request snapshot lists as sensitive: the
// rule's patterns expanded against args (ExpandPointers) and the values the
// tool schema marks (SchemaPointers), sorted and without repeats; nil when
// there are none.
func SensitivePointers(args, schema json.RawMessage, patterns []string) []string {
	out := append(ExpandPointers(args, patterns), SchemaPointers(schema, args)...)
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Redact returns args with the value each pointer names replaced whole by
// the string Mask (objects and arrays too). Pointers that name nothing in
// args are skipped; the pointer "" masks the whole value. Without pointers
// args is returned as it is; arguments that are not JSON are masked whole,
// since nothing in them can be told apart. Numbers keep their digits and
// the result has the shape of args, with masked values as strings.
func Redact(args json.RawMessage, pointers []string) json.RawMessage {
	if len(pointers) == 0 {
		return args
	}
	v, err := decodeNumbers(args)
	if err != nil {
		return maskJSON()
	}
	for _, p := range pointers {
		tokens, err := ParsePointer(p)
		if err != nil {
			continue
		}
		if len(tokens) == 0 {
			return maskJSON()
		}
		v = maskAt(v, tokens)
	}
	out, err := contracts.Marshal(v)
	if err != nil {
		return maskJSON()
	}
	return out
}

func maskJSON() json.RawMessage { return json.RawMessage(`"` + Mask + `"`) }

// maskAt replaces the value at tokens (at least one) below v by Mask.
func maskAt(v any, tokens []string) any {
	tok, rest := tokens[0], tokens[1:]
	switch c := v.(type) {
	case map[string]any:
		child, ok := c[tok]
		if !ok {
			return v
		}
		if len(rest) == 0 {
			c[tok] = Mask
		} else {
			c[tok] = maskAt(child, rest)
		}
	case []any:
		i, ok := arrayIndex(tok, len(c))
		if !ok {
			return v
		}
		if len(rest) == 0 {
			c[i] = Mask
		} else {
			c[i] = maskAt(c[i], rest)
		}
	}
	return v
}

// RedactDiff returns an RFC 6902 patch (as Diff writes it) whose values
// show nothing sensitive: an operation on a sensitive value, or inside one,
// keeps its op and path (the field changed) and gets Mask for its value;
// one that replaces or adds a value holding sensitive ones gets that value
// redacted. A patch that cannot be read is masked whole.
func RedactDiff(diff json.RawMessage, pointers []string) json.RawMessage {
	if len(pointers) == 0 || len(bytes.TrimSpace(diff)) == 0 {
		return diff
	}
	var ops []patchOp
	if err := json.Unmarshal(diff, &ops); err != nil {
		return maskJSON()
	}
	for i := range ops {
		op := &ops[i]
		if len(op.Value) == 0 {
			continue
		}
		masked := false
		var inner []string // pointers inside op.Value, relative to it
		for _, p := range pointers {
			switch {
			case op.Path == p || strings.HasPrefix(op.Path, p+"/"):
				masked = true
			case op.Path == "":
				inner = append(inner, p)
			case strings.HasPrefix(p, op.Path+"/"):
				inner = append(inner, strings.TrimPrefix(p, op.Path))
			}
		}
		switch {
		case masked:
			op.Value = maskJSON()
		case len(inner) > 0:
			op.Value = Redact(op.Value, inner)
		}
	}
	out, err := contracts.Marshal(ops)
	if err != nil {
		return maskJSON()
	}
	return out
}

// RecordSensitive is what rec shows masked: the union of the request's
// pointers and those the arbiter added for the edits (Record.Sensitive),
// sorted and without repeats; nil when there are none.
func RecordSensitive(rec *contracts.Record) []string {
	if len(rec.Sensitive) == 0 {
		return rec.Request.Sensitive
	}
	out := append(slices.Clone(rec.Request.Sensitive), rec.Sensitive...)
	slices.Sort(out)
	return slices.Compact(out)
}

// AddSensitive returns rec with pointers added to Record.Sensitive: the
// values an edit carries that are shown masked. Pointers the record already
// masks are not repeated; rec is returned as it is when nothing is new.
func AddSensitive(rec contracts.Record, pointers []string) contracts.Record {
	known := RecordSensitive(&rec)
	var add []string
	for _, p := range pointers {
		if !slices.Contains(known, p) {
			add = append(add, p)
		}
	}
	if len(add) == 0 {
		return rec
	}
	out := append(slices.Clone(rec.Sensitive), add...)
	slices.Sort(out)
	rec.Sensitive = slices.Compact(out)
	return rec
}

// RedactRequest returns a copy of req whose tool call arguments are
// redacted by req.Sensitive. The arguments hash is left out: a reader who
// may not see the masked values must not get a hash that confirms a guess
// of them.
func RedactRequest(req contracts.ApprovalRequested) contracts.ApprovalRequested {
	return redactRequest(req, req.Sensitive)
}

func redactRequest(req contracts.ApprovalRequested, pointers []string) contracts.ApprovalRequested {
	if len(pointers) == 0 || req.ToolCall == nil {
		return req
	}
	tc := *req.ToolCall
	tc.Arguments = Redact(tc.Arguments, pointers)
	tc.ArgumentsSHA256 = ""
	req.ToolCall = &tc
	return req
}

// RedactRecord returns a copy of rec with every argument value that
// RecordSensitive names masked: the request's arguments, the arguments of
// edit votes and of the outcome, and the outcome's diff. Every arguments
// hash of the record (the request's, the votes', the outcome's) is left
// out, since it would confirm a guess of a masked value; rec.Request's own
// Sensitive list is kept as it was requested.
func RedactRecord(rec contracts.Record) contracts.Record {
	ps := RecordSensitive(&rec)
	if len(ps) == 0 || rec.Request.Kind == contracts.KindHumanInput {
		return rec
	}
	rec.Request = redactRequest(rec.Request, ps)
	if len(rec.Votes) > 0 {
		votes := slices.Clone(rec.Votes)
		for i := range votes {
			votes[i].ArgumentsSHA256 = ""
			if len(votes[i].Arguments) > 0 && votes[i].Decision != contracts.DecisionAnswer {
				votes[i].Arguments = Redact(votes[i].Arguments, ps)
			}
		}
		rec.Votes = votes
	}
	rec.Outcome = RedactOutcome(rec.Request.Kind, rec.Outcome, ps)
	return rec
}

// RedactOutcome returns a copy of o with the arguments and diff of a tool
// call's outcome redacted by pointers, and without the arguments hash; nil
// stays nil, and the answer of a human_input request is not tool arguments
// and is left alone.
func RedactOutcome(kind string, o *contracts.Outcome, pointers []string) *contracts.Outcome {
	if o == nil || len(pointers) == 0 || kind == contracts.KindHumanInput {
		return o
	}
	c := *o
	c.ArgumentsSHA256 = ""
	if len(c.Arguments) > 0 {
		c.Arguments = Redact(c.Arguments, pointers)
	}
	if len(c.Diff) > 0 {
		c.Diff = RedactDiff(c.Diff, pointers)
	}
	return &c
}

package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"go.yaml.in/yaml/v3"
)

// This file reads `sensitive_fields:`, a CEL expression over the name of
// each field of a call's arguments that says which to mask, for arguments
// whose sensitive fields are known by name rather than by place:
//
//	sensitive_fields: 'field.matches("(?i)^(ssn|password|api_key|iban)$")'
//
// The expression sees `field` (the field's name, or an array element's
// index as a string) and `path` (its JSON pointer, "/card/number"). A field
// it holds true for is masked whole and not looked into further. It runs
// when a gated call is reviewed, and the concrete pointers join the
// request's sensitive list; the arbiter's check of the request runs it
// again on the same arguments.

// Limits of sensitive_fields.
const (
	// maxSensitiveFields bounds the fields one expression is run on per
	// call; the fields past it are masked (it fails closed).
	maxSensitiveFields = 10000
	// fieldCostLimit bounds the work of the expression on one field.
	fieldCostLimit = 1000
)

var fieldEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("field", cel.StringType),
		cel.Variable("path", cel.StringType),
		cel.ParserExpressionSizeLimit(maxConditionSize),
		ext.Strings(),
	)
})

// fieldMatcher is a compiled sensitive_fields expression.
type fieldMatcher struct {
	src string
	prg cel.Program
}

// readSensitiveFields compiles a sensitive_fields expression, reporting its
// problems at their place in the file.
func readSensitiveFields(v *yaml.Node, what string, ps *problems) *fieldMatcher {
	src := ps.str(v, what)
	if strings.TrimSpace(src) == "" {
		if v.Tag == "!!str" {
			ps.add(v.Line, v.Column, SeverityError, "%s: the expression is empty", what)
		}
		return nil
	}
	m, err := compileFieldMatcher(src)
	if err != nil {
		ps.add(v.Line, v.Column, SeverityError, "%s: %v", what, err)
		return nil
	}
	return m
}

func compileFieldMatcher(src string) (*fieldMatcher, error) {
	env, err := fieldEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return nil, fmt.Errorf("the expression must be a bool, but it is %s", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(fieldCostLimit))
	if err != nil {
		return nil, err
	}
	return &fieldMatcher{src: src, prg: prg}, nil
}

// matches runs the expression on one field; an error masks it.
func (m *fieldMatcher) matches(field, path string) bool {
	out, _, err := m.prg.Eval(map[string]any{"field": field, "path": path})
	if err != nil {
		return true
	}
	b, ok := out.Value().(bool)
	return !ok || b
}

// fieldPointers are the pointers of the fields of args that one of ms
// holds true for, in document order; args that are not JSON give none
// (the gate refuses them before).
func fieldPointers(args json.RawMessage, ms []*fieldMatcher) []string {
	if len(ms) == 0 || len(args) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	w := fieldWalk{ms: ms}
	w.walk(v, "")
	return w.out
}

type fieldWalk struct {
	ms   []*fieldMatcher
	seen int
	out  []string
}

func (w *fieldWalk) walk(v any, path string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			w.field(k, path+"/"+escapePointer(k), x[k])
		}
	case []any:
		for i, e := range x {
			w.field(strconv.Itoa(i), path+"/"+strconv.Itoa(i), e)
		}
	}
}

func (w *fieldWalk) field(name, path string, v any) {
	w.seen++
	if w.seen > maxSensitiveFields || slices.ContainsFunc(w.ms, func(m *fieldMatcher) bool { return m.matches(name, path) }) {
		w.out = append(w.out, path)
		return
	}
	w.walk(v, path)
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/parser"
)

// ConditionError is the error of a condition that failed while it ran: it
// names the part of the condition that failed and the values it was given
// ("args.amount is a string ("250"), the condition compares it with a
// number (100) using >"). Unwrap gives CEL's own error.
type ConditionError struct {
	// Explanation says which part failed on which values; it is empty
	// when CEL's error could not be traced to one.
	Explanation string
	Err         error
}

func (e *ConditionError) Error() string {
	if e.Explanation == "" {
		return e.Err.Error()
	}
	return e.Explanation + " (CEL: " + e.Err.Error() + ")"
}

func (e *ConditionError) Unwrap() error { return e.Err }

// explain runs the condition again with its evaluation state recorded and
// finds the innermost call (or field read) that failed while its operands
// did not: that is where the values did not fit. It returns err unchanged
// when the error is about time or cost rather than values, or when the
// failure cannot be traced.
func (c *condition) explain(act *activation, err error) error {
	if c.ast == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "cost limit") || strings.Contains(err.Error(), "interrupted") {
		return err
	}
	c.explainOnce.Do(func() {
		env, eerr := celEnv()
		if eerr != nil {
			return
		}
		c.explainPrg, _ = env.Program(c.ast, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptTrackState))
	})
	if c.explainPrg == nil {
		return err
	}
	_, det, _ := c.explainPrg.Eval(act)
	if det == nil || det.State() == nil {
		return err
	}
	state := det.State()
	native := c.ast.NativeRep()
	info := native.SourceInfo()
	failed := func(e ast.Expr) bool {
		v, ok := state.Value(e.ID())
		return ok && types.IsError(v)
	}
	var why string
	ast.PostOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if why != "" || !failed(e) {
			return
		}
		// Field and index reads are fused into one attribute (args.a["b"]),
		// so the state holds only the outermost value: find the read of the
		// missing key in the chain.
		v, _ := state.Value(e.ID())
		if key, ok := strings.CutPrefix(fmt.Sprint(v), "no such key: "); ok {
			why = missingKey(e, key, info)
			return
		}
		if e.Kind() != ast.CallKind {
			return
		}
		call := e.AsCall()
		var operands []ast.Expr
		if call.IsMemberFunction() {
			operands = append(operands, call.Target())
		}
		operands = append(operands, call.Args()...)
		var vals []operand
		for _, o := range operands {
			v, ok := state.Value(o.ID())
			if !ok || types.IsError(v) {
				return // the failure came from inside an operand
			}
			vals = append(vals, operand{text: unparse(o, info), val: v})
		}
		why = explainCall(call.FunctionName(), vals)
	}))
	if why == "" {
		return err
	}
	return &ConditionError{Explanation: why, Err: err}
}

// missingKey names the map that lacks key in the chain of reads e.
func missingKey(e ast.Expr, key string, info *ast.SourceInfo) string {
	for {
		switch e.Kind() {
		case ast.SelectKind:
			sel := e.AsSelect()
			if sel.FieldName() == key {
				return fmt.Sprintf("%s has no field %q", unparse(sel.Operand(), info), key)
			}
			e = sel.Operand()
			continue
		case ast.CallKind:
			call := e.AsCall()
			if call.FunctionName() == operators.Index && len(call.Args()) == 2 {
				if k := call.Args()[1]; k.Kind() == ast.LiteralKind && fmt.Sprint(k.AsLiteral().Value()) == key {
					return fmt.Sprintf("%s has no key %q", unparse(call.Args()[0], info), key)
				}
				e = call.Args()[0]
				continue
			}
		}
		return ""
	}
}

// operand is one value a failing call was given, with the text that
// produced it.
type operand struct {
	text string
	val  ref.Val
}

func (o operand) describe() string {
	if o.text == describeValue(o.val) {
		return o.text + " (" + kindOf(o.val) + ")"
	}
	return o.text + " is " + kindOf(o.val) + " (" + describeValue(o.val) + ")"
}

// explainCall says why function fn could not take vals.
func explainCall(fn string, vals []operand) string {
	op, isOp := operators.FindReverse(fn)
	if isOp && len(vals) == 2 {
		switch fn {
		case operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
			a, b := vals[0], vals[1]
			// Name the odd one out: the operand that is not a number when
			// the other is.
			if isNumber(a.val) && !isNumber(b.val) {
				a, b = b, a
			}
			return fmt.Sprintf("%s, the condition compares it with %s (%s) using %s",
				a.describe(), kindOf(b.val), strings.TrimSpace(b.textOrValue()), op)
		}
		return fmt.Sprintf("%s and %s; %s does not apply to %s and %s",
			vals[0].describe(), vals[1].describe(), op, kindOf(vals[0].val), kindOf(vals[1].val))
	}
	if isOp {
		fn = op
	}
	parts := make([]string, len(vals))
	kinds := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = v.describe()
		kinds[i] = kindOf(v.val)
	}
	return fmt.Sprintf("%s; %s does not take %s", strings.Join(parts, ", "), fn, strings.Join(kinds, " and "))
}

func (o operand) textOrValue() string {
	if d := describeValue(o.val); d != o.text {
		return o.text + " = " + d
	}
	return o.text
}

func unparse(e ast.Expr, info *ast.SourceInfo) string {
	s, err := parser.Unparse(e, info)
	if err != nil {
		return "a value"
	}
	return s
}

func isNumber(v ref.Val) bool {
	switch v.Type() {
	case types.IntType, types.UintType, types.DoubleType:
		return true
	}
	return false
}

// kindOf names the type of v for people.
func kindOf(v ref.Val) string {
	switch v.Type() {
	case types.StringType:
		return "a string"
	case types.IntType, types.UintType, types.DoubleType:
		return "a number"
	case types.BoolType:
		return "a boolean"
	case types.NullType:
		return "null"
	case types.ListType:
		return "a list"
	case types.MapType:
		return "a map"
	case types.BytesType:
		return "bytes"
	case types.TimestampType:
		return "a timestamp"
	case types.DurationType:
		return "a duration"
	}
	return "a " + v.Type().TypeName()
}

// describeValue shows v briefly: strings quoted, long values cut.
func describeValue(v ref.Val) string {
	var s string
	switch x := v.(type) {
	case types.String:
		s = fmt.Sprintf("%q", string(x))
	case types.Null:
		s = "null"
	default:
		switch v.Type() {
		case types.ListType, types.MapType:
			return kindOf(v)
		}
		s = fmt.Sprint(v.Value())
	}
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

package policy

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/countersign/countersign/contracts"
)

// This file gives conditions the history of recent calls:
//
//	history.count(tools, window)          int: calls of the scope whose tool matches
//	history.sum(tools, field, window)     double: the sum of a numeric argument over them
//	history.approved(tools, window)       bool: whether one of them was allowed to run
//
// history is the agent's scope; history.agent, history.run and
// history.tenant name a scope. The arguments are literals, so that a
// policy says, before any call, which figures it reads (HistoryUse).
// A History answers them; without one (or where it cannot answer
// exactly) the function errors, and the condition is taken both ways.

// History functions.
const (
	HistoryCount    = "count"
	HistorySum      = "sum"
	HistoryApproved = "approved"
)

// MaxHistoryWindow bounds the window of a history function.
const MaxHistoryWindow = 30 * 24 * time.Hour

// History answers the history functions of a call's conditions. The
// figures are over the calls before this one, never the call itself.
type History interface {
	Figure(q HistoryQuery) (float64, error)
}

// HistoryQuery is one history function a condition calls.
type HistoryQuery struct {
	// Scope is contracts.HistoryScopeAgent, HistoryScopeRun or
	// HistoryScopeTenant.
	Scope string
	// Func is HistoryCount, HistorySum or HistoryApproved.
	Func string
	// Tools is a glob of tool names.
	Tools string
	// Field is the argument summed: a top-level name, or an RFC 6901
	// pointer.
	Field  string
	Window time.Duration
}

// String is the query as a condition writes it.
func (q HistoryQuery) String() string {
	ns := "history."
	if q.Scope != contracts.HistoryScopeAgent {
		ns += q.Scope + "."
	}
	field := ""
	if q.Func == HistorySum {
		field = strconv.Quote(q.Field) + ", "
	}
	return fmt.Sprintf("%s%s(%q, %sduration(%q))", ns, q.Func, q.Tools, field, q.Window.String())
}

// Figure is the query's answer as a request carries it.
func (q HistoryQuery) Figure(v float64) contracts.HistoryFigure {
	return contracts.HistoryFigure{Scope: q.Scope, Func: q.Func, Tools: q.Tools, Field: q.Field, Window: q.Window.String(), Value: v}
}

// HistoryUse is what a policy's conditions read of the history.
type HistoryUse struct {
	// Queries are the distinct history functions, in file order.
	Queries []HistoryQuery
	// Fields are the argument fields the sums name, sorted.
	Fields []string
	// Window is the longest window.
	Window time.Duration
	// Scope is the widest scope the queries need one view of: "" when
	// there are none; the tenant's when they read the tenant or both the
	// agent and the run (which meet only in the tenant).
	Scope string
}

// HistoryUse says which history figures the policy's conditions read,
// enforcing and shadow rules alike.
func (p *Policy) HistoryUse() HistoryUse { return p.history }

func historyUseOf(conds []*condition) HistoryUse {
	var u HistoryUse
	scopes := map[string]bool{}
	for _, c := range conds {
		if c == nil {
			continue
		}
		for _, q := range c.history {
			if slices.Contains(u.Queries, q) {
				continue
			}
			u.Queries = append(u.Queries, q)
			u.Window = max(u.Window, q.Window)
			scopes[q.Scope] = true
			if q.Func == HistorySum && !slices.Contains(u.Fields, q.Field) {
				u.Fields = append(u.Fields, q.Field)
			}
		}
	}
	slices.Sort(u.Fields)
	switch {
	case scopes[contracts.HistoryScopeTenant] || scopes[contracts.HistoryScopeAgent] && scopes[contracts.HistoryScopeRun]:
		u.Scope = contracts.HistoryScopeTenant
	case scopes[contracts.HistoryScopeAgent]:
		u.Scope = contracts.HistoryScopeAgent
	case scopes[contracts.HistoryScopeRun]:
		u.Scope = contracts.HistoryScopeRun
	}
	return u
}

// historyType is the CEL type of the history variables.
var historyType = types.NewOpaqueType("countersign.History")

// historyVars are the history variables and the scope each reads.
var historyVars = map[string]string{
	"history":        contracts.HistoryScopeAgent,
	"history.agent":  contracts.HistoryScopeAgent,
	"history.run":    contracts.HistoryScopeRun,
	"history.tenant": contracts.HistoryScopeTenant,
}

// historyOverloads map the overload ids to the functions.
var historyOverloads = map[string]string{
	"history_count": HistoryCount, "history_sum": HistorySum, "history_approved": HistoryApproved,
}

// historyEnvOptions declare the history variables and functions.
func historyEnvOptions() []cel.EnvOption {
	opts := []cel.EnvOption{
		cel.Function(HistoryCount, cel.MemberOverload("history_count",
			[]*cel.Type{historyType, cel.StringType, cel.DurationType}, cel.IntType,
			cel.FunctionBinding(historyCall(HistoryCount)))),
		cel.Function(HistorySum, cel.MemberOverload("history_sum",
			[]*cel.Type{historyType, cel.StringType, cel.StringType, cel.DurationType}, cel.DoubleType,
			cel.FunctionBinding(historyCall(HistorySum)))),
		cel.Function(HistoryApproved, cel.MemberOverload("history_approved",
			[]*cel.Type{historyType, cel.StringType, cel.DurationType}, cel.BoolType,
			cel.FunctionBinding(historyCall(HistoryApproved)))),
	}
	for name := range historyVars {
		opts = append(opts, cel.Variable(name, historyType))
	}
	return opts
}

// historyVal is a history variable's value: the call's History, read in
// one scope.
type historyVal struct {
	h     History
	scope string
}

func (v historyVal) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("history is not a value")
}

func (v historyVal) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return historyType
	}
	return types.NewErr("history cannot be converted to %s", t.TypeName())
}
func (v historyVal) Equal(ref.Val) ref.Val { return types.False }
func (v historyVal) Type() ref.Type        { return historyType }
func (v historyVal) Value() any            { return v }

// errNoHistory is a history function's error where no History answers.
var errNoHistory = errors.New("no history of recent calls is available here")

func historyCall(fn string) func(args ...ref.Val) ref.Val {
	return func(args ...ref.Val) ref.Val {
		hv, ok := args[0].(historyVal)
		tools, ok2 := args[1].(types.String)
		win, ok3 := args[len(args)-1].(types.Duration)
		if !ok || !ok2 || !ok3 {
			return types.NewErr("history.%s: bad arguments", fn)
		}
		q := HistoryQuery{Scope: hv.scope, Func: fn, Tools: string(tools), Window: win.Duration}
		if fn == HistorySum {
			f, ok := args[2].(types.String)
			if !ok {
				return types.NewErr("history.sum: bad field")
			}
			q.Field = string(f)
		}
		if hv.h == nil {
			return types.WrapErr(fmt.Errorf("%s: %w", q, errNoHistory))
		}
		v, err := hv.h.Figure(q)
		if err != nil {
			return types.WrapErr(fmt.Errorf("%s: %w", q, err))
		}
		switch fn {
		case HistoryCount:
			return types.Int(int64(v))
		case HistorySum:
			return types.Double(v)
		}
		return types.Bool(v != 0)
	}
}

// historyQueries lists the history functions a checked condition calls,
// each with literal arguments (a problem otherwise).
func historyQueries(a *cel.Ast) ([]HistoryQuery, []celIssue) {
	native := a.NativeRep()
	refs := native.ReferenceMap()
	var qs []HistoryQuery
	var iss []celIssue
	celast.PostOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		r := refs[e.ID()]
		if e.Kind() != celast.CallKind || r == nil || len(r.OverloadIDs) != 1 {
			return
		}
		fn, ok := historyOverloads[r.OverloadIDs[0]]
		if !ok {
			return
		}
		q, err := historyQuery(fn, e.AsCall(), refs)
		if err != nil {
			loc := native.SourceInfo().GetStartLocation(e.ID())
			iss = append(iss, celIssue{line: loc.Line(), col: loc.Column(), msg: err.Error()})
			return
		}
		if !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}))
	return qs, iss
}

func historyQuery(fn string, call celast.CallExpr, refs map[int64]*celast.ReferenceInfo) (HistoryQuery, error) {
	q := HistoryQuery{Func: fn, Scope: contracts.HistoryScopeAgent}
	if r := refs[call.Target().ID()]; r != nil {
		if s, ok := historyVars[r.Name]; ok {
			q.Scope = s
		}
	}
	args := call.Args()
	var err error
	if q.Tools, err = literalString(args[0]); err != nil || strings.TrimSpace(q.Tools) == "" {
		return q, fmt.Errorf("history.%s: the tools must be a literal glob, such as \"payments.*\"", fn)
	}
	if fn == HistorySum {
		if q.Field, err = literalString(args[1]); err != nil || q.Field == "" || strings.HasPrefix(q.Field, "/") && !validPointer(q.Field) {
			return q, fmt.Errorf("history.sum: the field must be a literal argument name or JSON pointer, such as \"amount\"")
		}
	}
	w := args[len(args)-1]
	if w.Kind() != celast.CallKind || w.AsCall().FunctionName() != "duration" || len(w.AsCall().Args()) != 1 {
		return q, fmt.Errorf("history.%s: the window must be a literal duration, such as duration(\"1h\")", fn)
	}
	s, err := literalString(w.AsCall().Args()[0])
	if err == nil {
		q.Window, err = time.ParseDuration(s)
	}
	switch {
	case err != nil:
		return q, fmt.Errorf("history.%s: the window must be a literal duration, such as duration(\"1h\")", fn)
	case q.Window <= 0 || q.Window > MaxHistoryWindow:
		return q, fmt.Errorf("history.%s: the window %s must be positive and at most %s", fn, s, contracts.ShortDuration(MaxHistoryWindow))
	}
	return q, nil
}

func literalString(e celast.Expr) (string, error) {
	if e.Kind() == celast.LiteralKind {
		if s, ok := e.AsLiteral().(types.String); ok {
			return string(s), nil
		}
	}
	return "", errors.New("not a literal string")
}

// validPointer reports whether p is an RFC 6901 pointer: "/" then tokens
// in which "~" is always "~0" or "~1".
func validPointer(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || p[i+1] != '0' && p[i+1] != '1') {
			return false
		}
	}
	return strings.HasPrefix(p, "/")
}

// FiguresHistory answers from the figures a request carries: a query it
// carries no figure for is an error, so the condition is taken both ways.
func FiguresHistory(figs []contracts.HistoryFigure) History { return figures(figs) }

type figures []contracts.HistoryFigure

func (fs figures) Figure(q HistoryQuery) (float64, error) {
	want := q.Figure(0)
	for _, f := range fs {
		if f.Scope == want.Scope && f.Func == want.Func && f.Tools == want.Tools && f.Field == want.Field &&
			f.Window == want.Window {
			return checkFigure(q.Func, f.Value)
		}
	}
	return 0, errors.New("the request carries no figure for it")
}

// checkFigure refuses a figure no history can give: a count that is not
// a whole number from 0, approved other than 0 or 1, a sum that is not
// finite.
func checkFigure(fn string, v float64) (float64, error) {
	ok := !math.IsNaN(v) && !math.IsInf(v, 0)
	switch fn {
	case HistoryCount:
		ok = ok && v >= 0 && v == math.Trunc(v)
	case HistoryApproved:
		ok = v == 0 || v == 1
	}
	if !ok {
		return 0, fmt.Errorf("the request's figure %v is not one history can give", v)
	}
	return v, nil
}

// Recorder is a History that keeps every figure it answered, for the
// request.
type Recorder struct {
	H    History
	figs []contracts.HistoryFigure
}

// Figure answers from H and keeps the figure.
func (r *Recorder) Figure(q HistoryQuery) (float64, error) {
	if r.H == nil {
		return 0, errNoHistory
	}
	v, err := r.H.Figure(q)
	if err == nil && len(r.figs) < contracts.MaxHistoryFigures {
		f := q.Figure(v)
		if !slices.Contains(r.figs, f) {
			r.figs = append(r.figs, f)
		}
	}
	return v, err
}

// Figures are the figures answered so far.
func (r *Recorder) Figures() []contracts.HistoryFigure { return slices.Clone(r.figs) }

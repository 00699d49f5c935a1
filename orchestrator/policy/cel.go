package policy

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/countersign/countersign/contracts"
)

// Limits of a condition.
const (
	// CostLimit bounds the work one condition may do per call, in CEL cost
	// units (about one per comparison, field access or list element).
	// A condition that exceeds it errors, and the call gates.
	CostLimit = 10000
	// maxConditionSize bounds the text of one condition.
	maxConditionSize = 8192
	// interruptEvery is how many comprehension iterations run between
	// checks of the context passed to EvaluateContext.
	interruptEvery = 100
)

// Condition variables.
const (
	varArgs   = "args"
	varRun    = "run"
	varTool   = "tool"
	varAgent  = "agent"
	varTenant = "tenant"
	varLabels = "labels"
)

// celEnv is the one environment every condition is compiled in. An Env is
// immutable and safe for concurrent use.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(append(historyEnvOptions(),
		cel.Variable(varArgs, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varRun, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varTool, cel.StringType),
		cel.Variable(varAgent, cel.StringType),
		cel.Variable(varTenant, cel.StringType),
		cel.Variable(varLabels, cel.MapType(cel.StringType, cel.StringType)),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		cel.ParserExpressionSizeLimit(maxConditionSize),
		ext.Strings(),
	)...)
})

// condition is a compiled `when:`.
type condition struct {
	src string // as written, whitespace collapsed (for explanations)
	// fast runs without counting its cost, for calls whose inputs are at
	// most fastUpTo in size; tracked counts and stops at CostLimit. Either
	// may be nil: then the other serves every call.
	fast      cel.Program
	fastUpTo  uint64
	tracked   cel.Program
	readsArgs bool // the condition reads args
	readsRun  bool // the condition reads run
	// history are the history functions it calls (see history.go).
	history []HistoryQuery
	// ast and the program built from it on the first error, which records
	// every value, explain what failed (see explain).
	ast         *cel.Ast
	explainOnce sync.Once
	explainPrg  cel.Program
}

// celIssue is a compile problem of a condition, positioned within its text
// (line from 1, column from 0, as CEL counts).
type celIssue struct {
	line, col int
	msg       string
}

// compileCondition type-checks src and builds its program. The result must
// be a bool (or dyn, checked when it runs).
func compileCondition(src string) (*condition, []celIssue) {
	env, err := celEnv()
	if err != nil {
		return nil, []celIssue{{msg: "CEL environment: " + err.Error()}}
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var out []celIssue
		for _, e := range iss.Errors() {
			msg := strings.TrimSuffix(e.Message, " (in container '')")
			out = append(out, celIssue{line: e.Location.Line(), col: e.Location.Column(), msg: msg})
		}
		if len(out) == 0 {
			out = append(out, celIssue{msg: iss.Err().Error()})
		}
		return nil, out
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, []celIssue{{line: 1, msg: fmt.Sprintf("condition must be a bool, but it is %s", t)}}
	}
	// CEL's cost estimator bounds the worst case of a condition, given
	// bounds on the sizes of its inputs. A condition bounded within the
	// limit whatever the inputs (comparisons, field reads, startsWith with a
	// constant) cannot exceed it and runs without a cost tracker, which
	// would cost more than the condition. For the rest (regular expressions,
	// comprehensions, comparisons of whole values) find the largest input
	// size that keeps the bound within the limit: calls whose inputs are
	// that small (almost all) run untracked too, larger ones are tracked and
	// stopped at the limit.
	var iss2 []celIssue
	unbounded, err := env.EstimateCost(ast, sizeBound(0))
	if err != nil {
		return nil, []celIssue{{line: 1, msg: "cost estimate: " + err.Error()}}
	}
	if unbounded.Min > CostLimit {
		return nil, []celIssue{{line: 1, msg: fmt.Sprintf("condition always costs at least %d, over the limit of %d", unbounded.Min, CostLimit)}}
	}
	c := &condition{src: strings.Join(strings.Fields(src), " "), fastUpTo: math.MaxUint64, ast: ast}
	if c.history, iss2 = historyQueries(ast); len(iss2) > 0 {
		return nil, iss2
	}
	if unbounded.Max > CostLimit {
		c.fastUpTo = 0
		for m := uint64(64); m <= 1<<24; m *= 2 {
			est, err := env.EstimateCost(ast, sizeBound(m))
			if err != nil || est.Max > CostLimit {
				break
			}
			c.fastUpTo = m
		}
		if c.tracked, err = env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(interruptEvery), cel.EvalOptions(cel.OptOptimize)); err != nil {
			return nil, []celIssue{{line: 1, msg: err.Error()}}
		}
	}
	if c.fastUpTo > 0 {
		if c.fast, err = env.Program(ast, cel.InterruptCheckFrequency(interruptEvery), cel.EvalOptions(cel.OptOptimize)); err != nil {
			return nil, []celIssue{{line: 1, msg: err.Error()}}
		}
	}
	for _, r := range ast.NativeRep().ReferenceMap() {
		switch r.Name {
		case varArgs:
			c.readsArgs = true
		case varRun:
			c.readsRun = true
		}
	}
	return c, nil
}

// sizeBound tells the cost estimator that every value a condition reads
// (a string's length, a list's or map's number of entries) is at most that
// big; 0 leaves sizes unknown, so unbounded.
type sizeBound uint64

func (sizeBound) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (b sizeBound) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if b == 0 || n.Path() == nil {
		return nil
	}
	return &cost.SizeEstimate{Min: 0, Max: uint64(b)}
}

// eval runs the condition; any error, and any result but a bool, is an error.
func (c *condition) eval(ctx context.Context, act *activation) (bool, error) {
	prg := c.tracked
	if c.fast != nil && (prg == nil || act.size() <= c.fastUpTo) {
		prg = c.fast
	}
	var (
		out ref.Val
		err error
	)
	if ctx.Done() != nil { // a context that can end: check it while running
		out, _, err = prg.ContextEval(ctx, act)
	} else {
		out, _, err = prg.Eval(act)
	}
	if err != nil {
		return false, c.explain(act, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("condition returned %s, not a bool", out.Type())
	}
	return bool(b), nil
}

// activation gives a condition the variables of one call. It is built once
// per call, and args is decoded only when a condition reads it.
type activation struct {
	in      Input // a copy, so that the caller's Input stays on its stack
	args    map[string]any
	argsErr error
	run     *runValue
	sz      uint64 // size(), once known
}

// size bounds the size of every value a condition can read: no string in
// the call is longer, in characters, than its bytes, and no list or map
// has more entries than that either.
func (a *activation) size() uint64 {
	if a.sz == 0 {
		r := &a.in.Run
		n := 16 + len(a.in.Arguments) + len(a.in.Tool) + len(r.ID) + len(r.ThreadID) + len(r.Agent) +
			len(r.RequestedBy) + len(r.Owner) + len(r.Tenant)
		for k, v := range r.Labels {
			n += 1 + len(k) + len(v)
		}
		a.sz = uint64(n)
	}
	return a.sz
}

// prepare builds what condition c reads; it returns an error when the
// arguments cannot be decoded.
func (a *activation) prepare(c *condition) error {
	if c.readsArgs && a.args == nil {
		if a.argsErr == nil {
			a.args, a.argsErr = decodeArgs(a.in.Arguments)
		}
		if a.argsErr != nil {
			return a.argsErr
		}
	}
	if c.readsRun && a.run == nil {
		a.run = &runValue{r: &a.in.Run}
	}
	return nil
}

var noLabels = map[string]string{}

func labelsOf(m map[string]string) map[string]string {
	if m == nil {
		return noLabels
	}
	return m
}

// ResolveName implements interpreter.Activation. Maps are returned as Go
// maps, which CEL reads a field of without converting the whole map.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varArgs:
		return a.args, a.args != nil
	case varRun:
		return a.run, a.run != nil
	case varTool:
		return a.in.Tool, true
	case varAgent:
		return a.in.Run.Agent, true
	case varTenant:
		return a.in.Run.Tenant, true
	case varLabels:
		return labelsOf(a.in.Run.Labels), true
	}
	if scope, ok := historyVars[name]; ok {
		return historyVal{h: a.in.History, scope: scope}, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// runValue is the `run` variable: a CEL map whose fields are read straight
// from the contracts.Run (run.tenant costs no map), and which becomes a
// real map only when a condition uses it whole (size(run), "id" in run).
type runValue struct {
	r *contracts.Run
	m traits.Mapper
}

// FindStringKey is the interpreter's fast path for run.NAME.
func (v *runValue) FindStringKey(k string) (any, bool) {
	switch k {
	case "id":
		return v.r.ID, true
	case "thread_id":
		return v.r.ThreadID, true
	case "agent":
		return v.r.Agent, true
	case "requested_by":
		return v.r.RequestedBy, true
	case "owner":
		return v.r.Owner, true
	case "tenant":
		return v.r.Tenant, true
	case "labels":
		return labelsOf(v.r.Labels), true
	}
	return nil, false
}

func (v *runValue) full() traits.Mapper {
	if v.m == nil {
		r := v.r
		v.m = types.DefaultTypeAdapter.NativeToValue(map[string]any{
			"id": r.ID, "thread_id": r.ThreadID, "agent": r.Agent, "requested_by": r.RequestedBy,
			"owner": r.Owner, "tenant": r.Tenant, "labels": labelsOf(r.Labels),
		}).(traits.Mapper)
	}
	return v.m
}

// The rest of ref.Val and traits.Mapper, by the real map.

func (v *runValue) ConvertToNative(t reflect.Type) (any, error) { return v.full().ConvertToNative(t) }
func (v *runValue) ConvertToType(t ref.Type) ref.Val            { return v.full().ConvertToType(t) }
func (v *runValue) Equal(other ref.Val) ref.Val                 { return v.full().Equal(other) }
func (v *runValue) Type() ref.Type                              { return types.MapType }
func (v *runValue) Value() any                                  { return v.full().Value() }
func (v *runValue) Contains(key ref.Val) ref.Val                { return v.full().Contains(key) }
func (v *runValue) Get(key ref.Val) ref.Val                     { return v.full().Get(key) }
func (v *runValue) Iterator() traits.Iterator                   { return v.full().Iterator() }
func (v *runValue) Size() ref.Val                               { return v.full().Size() }
func (v *runValue) Find(key ref.Val) (ref.Val, bool)            { return v.full().Find(key) }

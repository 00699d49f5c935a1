package policy

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestFastPathIsWithinTheCostLimit checks the reasoning that lets most
// conditions run without a cost tracker: for inputs no bigger than
// fastUpTo, the tracked program never exceeds the limit. Each input fills
// the size budget as densely as it can (one-character elements).
func TestFastPathIsWithinTheCostLimit(t *testing.T) {
	tests := []struct {
		when string
		args func(n int) any // n: a size to fill
	}{
		{`args.items.exists(i, i > 3)`, func(n int) any { return map[string]any{"items": ones(n / 2)} }},
		{`args.items.all(x, args.items.all(y, x == y || x != y))`, func(n int) any { return map[string]any{"items": ones(n / 2)} }},
		{`args.s.matches("^(a|b)*c$")`, func(n int) any { return map[string]any{"s": strings.Repeat("a", n)} }},
		{`args.s.contains("zz") || args.s.endsWith("q")`, func(n int) any { return map[string]any{"s": strings.Repeat("z", n)} }},
		{`args.a == args.b`, func(n int) any { return map[string]any{"a": ones(n / 4), "b": ones(n / 4)} }},
		{`args.s.split(",").size() > 3`, func(n int) any { return map[string]any{"s": strings.Repeat(",", n)} }},
		{`args.items.map(x, x + 1).filter(y, y > 1).size() > 0`, func(n int) any { return map[string]any{"items": ones(n / 2)} }},
		{`run.labels.exists(k, run.labels[k] == "x")`, func(int) any { return map[string]any{} }},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			c, issues := compileCondition(tt.when)
			if issues != nil {
				t.Fatal(issues)
			}
			if c.tracked == nil {
				// The estimate bounds the cost for every input: the fast
				// program serves every call, whatever its size.
				if c.fast == nil || c.fastUpTo != math.MaxUint64 {
					t.Errorf("untracked condition: fast %v, bound %d; want a fast program for any size", c.fast != nil, c.fastUpTo)
				}
				return
			}
			t.Logf("fast up to %d bytes of input", c.fastUpTo)
			if c.fastUpTo == 0 {
				return
			}
			for n := int(c.fastUpTo) - 64; n > 0; n -= 64 {
				raw, _ := json.Marshal(tt.args(n))
				in := Input{Tool: "t", Arguments: raw}
				act := &activation{in: in}
				if act.size() > c.fastUpTo {
					continue
				}
				if err := act.prepare(c); err != nil {
					t.Fatal(err)
				}
				if _, _, err := c.tracked.Eval(act); err != nil && strings.Contains(err.Error(), "cost") {
					t.Fatalf("input of size %d (fast up to %d) exceeds the cost limit: %v", act.size(), c.fastUpTo, err)
				}
				break // the largest input that fits is the one that matters
			}
		})
	}
}

func ones(n int) []int {
	l := make([]int, max(n, 0))
	for i := range l {
		l[i] = 1
	}
	return l
}

// TestConditionProgramChoice checks which conditions need a cost tracker.
func TestConditionProgramChoice(t *testing.T) {
	tests := []struct {
		when    string
		tracked bool
	}{
		{`args.amount > 100`, false},
		{`tenant == "prod" && labels.env == "prod"`, false},
		{`args.recipient.startsWith("internal-")`, false},
		{`args.ref.matches("^TEST-")`, true},
		{`args.items.exists(i, i > 3)`, true},
		{`run.requested_by == run.owner`, true},
	}
	for _, tt := range tests {
		c, issues := compileCondition(tt.when)
		if issues != nil {
			t.Fatal(issues)
		}
		if got := c.tracked != nil; got != tt.tracked || c.fast == nil {
			t.Errorf("%s: tracked %v (fast %v up to %d), want tracked %v", tt.when, got, c.fast != nil, c.fastUpTo, tt.tracked)
		}
	}
}

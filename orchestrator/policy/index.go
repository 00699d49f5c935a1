package policy

import (
	"sync"
	"sync/atomic"
)

// maxIndexedTools bounds how many tool names a policy remembers the
// candidate rules of; names beyond it are matched rule by rule every time,
// so a flood of made-up tool names costs time, never unbounded memory.
const maxIndexedTools = 4096

// toolIndex remembers, per tool name, which rules' tool globs match it:
// agents use a handful of tools over and over, so most calls skip the
// globs of every rule for other tools.
type toolIndex struct {
	m sync.Map // tool name → []int32, indexes into Policy.rules
	n atomic.Int32
}

// candidates returns the indexes of the rules whose tool globs match tool
// (rules without tool globs included), in order.
func (p *Policy) candidates(tool string) []int32 {
	if v, ok := p.index.m.Load(tool); ok {
		return v.([]int32)
	}
	var c []int32
	for i := range p.rules {
		r := &p.rules[i]
		if len(r.tools) == 0 || matchGlobs(r.tools, tool) {
			c = append(c, int32(i))
		}
	}
	if p.index.n.Load() < maxIndexedTools {
		if _, loaded := p.index.m.LoadOrStore(tool, c); !loaded {
			p.index.n.Add(1)
		}
	}
	return c
}

func matchGlobs(globs []glob, s string) bool {
	for i := range globs {
		if globs[i].match(s) {
			return true
		}
	}
	return false
}

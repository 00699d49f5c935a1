package oversight

import (
	"cmp"
	"slices"
)

// Tally gathers the rows of a report by rule, and by rule and risk, one
// request at a time, holding none of them: what a periodic reader (the
// /metrics collector) needs, at the cost of one pass over the window and
// the times to decide. A rule's row is the one Compute gives it.
type Tally struct {
	o      Options
	rules  map[string]*Stats
	groups map[RuleRisk]*TallyRow
}

// RuleRisk names a row of a Tally by rule and risk.
type RuleRisk struct{ Rule, Risk string }

// TallyRow is a rule and risk's figures: those of a rule's row, and the
// counted votes by decision (approve and edit apart).
type TallyRow struct {
	Stats
	ByDecision map[string]int
}

// NewTally starts a tally of the requests of o's window.
func NewTally(o Options) *Tally {
	if o.Fast <= 0 {
		o.Fast = DefaultFast
	}
	return &Tally{o: o, rules: map[string]*Stats{}, groups: map[RuleRisk]*TallyRow{}}
}

// Add counts req when it is in the window. The tally keeps nothing of
// req itself: the caller may reuse it.
func (t *Tally) Add(req *Request) {
	if !t.o.InWindow(req.CreatedAt) {
		return
	}
	rule := t.rules[req.Rule]
	if rule == nil {
		rule = &Stats{}
		t.rules[req.Rule] = rule
	}
	rule.add(req, t.o.Fast)
	k := RuleRisk{req.Rule, req.Risk}
	g := t.groups[k]
	if g == nil {
		g = &TallyRow{ByDecision: map[string]int{}}
		t.groups[k] = g
	}
	g.add(req, t.o.Fast)
	for j := range req.Votes {
		g.ByDecision[req.Votes[j].Decision]++
	}
}

// Rules returns each rule's row, by rule name, the rows done (spread,
// rate, sorted times). Call it once, after the last Add.
func (t *Tally) Rules() []RuleStats {
	out := make([]RuleStats, 0, len(t.rules))
	for name, st := range t.rules {
		st.finish()
		out = append(out, RuleStats{Rule: name, Stats: *st})
	}
	slices.SortFunc(out, func(a, b RuleStats) int { return cmp.Compare(a.Rule, b.Rule) })
	return out
}

// Groups returns the rule and risk rows in the order of their keys, the
// rows done. Call it once, after the last Add.
func (t *Tally) Groups() ([]RuleRisk, []*TallyRow) {
	keys := make([]RuleRisk, 0, len(t.groups))
	for k := range t.groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b RuleRisk) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Risk, b.Risk)) })
	rows := make([]*TallyRow, len(keys))
	for i, k := range keys {
		rows[i] = t.groups[k]
		rows[i].finish()
	}
	return keys, rows
}

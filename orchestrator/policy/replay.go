package policy

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// This file replays recorded requests against a candidate policy: each
// request's call is decided by the candidate and compared, setting by
// setting, with the gate the request recorded. A replay holds counts and a
// few examples per change, never the requests, so its memory is bounded by
// the candidate's rules, whatever the length of the history.

// Fields a replay compares.
const (
	ReplayAction    = "action"
	ReplayApprovers = "approvers"
	ReplayQuorum    = "quorum"
	ReplayRisk      = "risk"
	ReplayStepUp    = "step_up"
)

// Bounds of a replay's report.
const (
	// DefaultReplayExamples is how many example requests a change shows.
	DefaultReplayExamples = 3
	// maxReplayChanges bounds the distinct changes kept per rule; later
	// ones are counted under from and to "other".
	maxReplayChanges = 64
	// maxReplayValue bounds a from or to value (an approver list).
	maxReplayValue = 200
)

// ReplayOptions configure a Replay.
type ReplayOptions struct {
	// Examples is how many readable example requests each change shows
	// (DefaultReplayExamples when 0).
	Examples int
	// Resolve, when set, resolves the "group:NAME" approvers the candidate
	// leaves to a directory, as the gate would when it creates a request.
	Resolve func(approvers []string) []string
}

// Replay accumulates the replay of recorded requests against a candidate
// policy. It is not safe for concurrent use.
type Replay struct {
	candidate *Policy
	opts      ReplayOptions
	report    ReplayReport
	rules     map[string]*ReplayRule
}

// ReplayReport is what a replay found: per rule of the candidate (the rule
// that decides each request's call under it), the requests it decides and
// what would change for them.
type ReplayReport struct {
	// Candidate is the candidate's version.
	Candidate string `json:"candidate"`
	// Requests are the tool approval requests replayed; Changed those
	// for which anything compared would change.
	Requests int `json:"requests"`
	Changed  int `json:"changed"`
	// Questions are the human_input requests, which are not replayed (a
	// question is asked whatever the policy allows).
	Questions int `json:"questions"`
	// Rules: most changed requests first.
	Rules []ReplayRule `json:"rules"`
}

// ReplayRule is one rule of the candidate in a replay.
type ReplayRule struct {
	Rule     string          `json:"rule"`
	Requests int             `json:"requests"`
	Changed  int             `json:"changed"`
	Changes  []*ReplayChange `json:"changes"`
}

// ReplayChange counts the requests whose Field would go From To (actions,
// quorums, risks, step-ups, approver lists: "anyone" for none; "none" for
// no step-up), with a few examples.
type ReplayChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
	Count int    `json:"count"`
	// Examples are requests the reader may read; Hidden counts the
	// examples left out because the reader may not.
	Examples []ReplayExample `json:"examples"`
	Hidden   int             `json:"hidden"`
}

// ReplayExample is one request of a change.
type ReplayExample struct {
	EventID string `json:"event_id"`
	Tool    string `json:"tool"`
	Agent   string `json:"agent"`
	Tenant  string `json:"tenant,omitempty"`
	// Rule is the rule that gated it when it was recorded; Status is its
	// status now.
	Rule      string    `json:"rule"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// NewReplay starts a replay against candidate.
func NewReplay(candidate *Policy, opts ReplayOptions) *Replay {
	if opts.Examples <= 0 {
		opts.Examples = DefaultReplayExamples
	}
	return &Replay{
		candidate: candidate, opts: opts, rules: map[string]*ReplayRule{},
		report: ReplayReport{Candidate: candidate.Version()},
	}
}

// Add replays one record: its request's call is decided by the candidate
// and compared with the gate it recorded. readable says whether the
// replay's reader may read the record: only then can it be an example.
func (r *Replay) Add(ctx context.Context, rec *contracts.Record, readable bool) {
	req := &rec.Request
	if req.Kind == contracts.KindHumanInput {
		r.report.Questions++
		return
	}
	d := r.candidate.EvaluateContext(ctx, RequestInput(req))
	row := r.rules[d.Rule]
	if row == nil {
		row = &ReplayRule{Rule: d.Rule, Changes: []*ReplayChange{}}
		r.rules[d.Rule] = row
	}
	r.report.Requests++
	row.Requests++
	changes := r.Changes(req, d)
	if len(changes) == 0 {
		return
	}
	r.report.Changed++
	row.Changed++
	for _, c := range changes {
		ch := row.change(c)
		ch.Count++
		switch {
		case !readable:
			ch.Hidden++
		case len(ch.Examples) < r.opts.Examples:
			ch.Examples = append(ch.Examples, example(rec))
		}
	}
}

// Change is one setting that differs: Field goes From To.
type Change struct{ Field, From, To string }

// Changes compares the gate req recorded with d, the candidate's decision
// of its call: the action (every request was gated); for a call d still
// gates, the quorum, risk, step-up and approvers.
func (r *Replay) Changes(req *contracts.ApprovalRequested, d Decision) []Change {
	if d.Action != ActionRequireApproval {
		return []Change{{ReplayAction, ActionRequireApproval, d.Action}}
	}
	var out []Change
	add := func(field, from, to string) {
		if from != to {
			out = append(out, Change{field, from, to})
		}
	}
	add(ReplayQuorum, strconv.Itoa(max(1, req.Quorum.Required)), strconv.Itoa(max(1, d.Quorum)))
	add(ReplayRisk, req.Risk, d.Risk)
	add(ReplayStepUp, cmp.Or(req.StepUp, "none"), cmp.Or(d.StepUp, "none"))
	approvers := d.Approvers
	if r.opts.Resolve != nil && slices.ContainsFunc(approvers, func(a string) bool { return strings.HasPrefix(a, groupPrefix) }) {
		approvers = r.opts.Resolve(approvers)
	}
	add(ReplayApprovers, approverList(req.Quorum.Approvers), approverList(approvers))
	return out
}

// approverList writes a set of approvers in one string: sorted, "anyone"
// for none, cut at maxReplayValue bytes.
func approverList(list []string) string {
	if len(list) == 0 {
		return "anyone"
	}
	s := slices.Clone(list)
	slices.Sort(s)
	out := strings.Join(slices.Compact(s), ",")
	if len(out) > maxReplayValue {
		out = out[:maxReplayValue] + "…"
	}
	return out
}

// change finds or adds the row's counter of c.
func (row *ReplayRule) change(c Change) *ReplayChange {
	for _, ch := range row.Changes {
		if ch.Field == c.Field && ch.From == c.From && ch.To == c.To {
			return ch
		}
	}
	if len(row.Changes) >= maxReplayChanges {
		c.From, c.To = "other", "other"
		for _, ch := range row.Changes {
			if ch.Field == c.Field && ch.From == c.From && ch.To == c.To {
				return ch
			}
		}
	}
	ch := &ReplayChange{Field: c.Field, From: c.From, To: c.To, Examples: []ReplayExample{}}
	row.Changes = append(row.Changes, ch)
	return ch
}

func example(rec *contracts.Record) ReplayExample {
	req := &rec.Request
	ex := ReplayExample{EventID: req.EventID, Agent: req.Run.Agent, Tenant: req.Run.Tenant, Rule: req.Policy.Rule,
		Status: rec.Status, CreatedAt: req.CreatedAt}
	if req.ToolCall != nil {
		ex.Tool = req.ToolCall.Name
	}
	return ex
}

// Report returns what the replay found so far: rules by most changed
// requests, then most requests, then name; changes by most requests.
func (r *Replay) Report() ReplayReport {
	rep := r.report
	rep.Rules = make([]ReplayRule, 0, len(r.rules))
	for _, row := range r.rules {
		cp := *row
		cp.Changes = slices.Clone(row.Changes)
		slices.SortStableFunc(cp.Changes, func(a, b *ReplayChange) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Field, b.Field), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
		})
		rep.Rules = append(rep.Rules, cp)
	}
	slices.SortFunc(rep.Rules, func(a, b ReplayRule) int {
		return cmp.Or(cmp.Compare(b.Changed, a.Changed), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Rule, b.Rule))
	})
	return rep
}

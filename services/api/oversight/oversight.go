package oversight

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/countersign/countersign/contracts"
)

// DefaultWindow and DefaultFast are the window and the fast-decision
// threshold used when a caller names none.
const (
	DefaultWindow = 30 * 24 * time.Hour
	DefaultFast   = 10 * time.Second
)

// Vote is what the figures need of one counted vote.
type Vote struct {
	Approver  string
	Decision  string
	DecidedAt time.Time
}

// Request is what the figures need of one approval record.
type Request struct {
	EventID string
	// Rule is the policy rule that gated the call ("" when none did).
	Rule      string
	Risk      string
	CreatedAt time.Time
	// Approvers are who could decide it: the quorum's approvers and those of
	// the escalation tiers it reached. Empty means any approver.
	Approvers []string
	// Votes are its counted votes.
	Votes []Vote
	// TimedOut is set when time decided it (its outcome's decided_by names
	// "timeout"): expired, or approved by on_timeout: approve.
	TimedOut bool
	// Shadow is what the policy's shadow rules would have decided for it,
	// as its request records.
	Shadow []Shadow
	// Status is the record's status (pending, approved, …).
	Status string
	// Channel is what decided it (notifier.DecisionChannel): the via of the
	// vote that completed it (web, slack, email, push, api, cli, nats),
	// "timeout", "cancelled"; "" while it is pending. DecidedAfter is how
	// long from the request to its outcome.
	Channel      string
	DecidedAfter time.Duration
	// Claimed is set once the approved call was claimed (it is about to
	// run); Execution is how it ended as its claimant reported it
	// (contracts.ExecutionSucceeded or ExecutionFailed), "" before a report.
	Claimed   bool
	Execution string
	// Review is its automated reviewer and opinion (nil: the rule names
	// none).
	Review *Review
}

// Shadow is what one shadow rule would have decided for a request: its
// action (allow, require_approval or deny).
type Shadow struct {
	Rule   string
	Action string
}

// Options are the window and the fast-decision threshold.
type Options struct {
	// Since and Until bound the window: requests created in [Since, Until).
	// A zero Until has no upper bound.
	Since, Until time.Time
	// Fast is the threshold below which a decision on a high or critical
	// risk request counts as fast (DefaultFast when zero).
	Fast time.Duration
}

// Report is the oversight view of one window.
type Report struct {
	Since                time.Time `json:"since"`
	Until                time.Time `json:"until"`
	FastThresholdSeconds float64   `json:"fast_threshold_seconds"`
	// Total covers every request in the window.
	Total Stats `json:"total"`
	// Approvers has a row for each approver who decided, or was named by
	// a request that expired undecided: most decisions first.
	Approvers []ApproverStats `json:"approvers"`
	// Rules has a row for each rule with a request in the window: most
	// requests first.
	Rules []RuleStats `json:"rules"`
	// Shadow has a row for each shadow rule that recorded a verdict on a
	// request in the window: most requests first. Records hold gated
	// calls only, so every flip here is from require_approval; the
	// countersign_policy_shadow_flips_total counters also count the calls
	// the policy allowed or denied outright.
	Shadow []ShadowStats `json:"shadow"`
	// Channels has a row for each channel that decided a request of the
	// window: most requests first.
	Channels []ChannelStats `json:"channels"`
	// Execution says of the approved requests of the window how many were
	// claimed and what their claimants reported.
	Execution ExecutionStats `json:"execution"`
	// Reviewers has a row for each automated reviewer that gave (or failed
	// to give) an opinion on a request of the window: most opinions first.
	Reviewers []ReviewerStats `json:"reviewers"`
	// Partial is true when decided requests of the window were left out:
	// an API replica keeps the newest decided records only (its
	// index_recent), and older ones created in the window are not counted.
	Partial bool `json:"partial,omitempty"`
}

// ShadowStats are one shadow rule's figures: the requests it would have
// matched before the enforcing decision, and of those, how many it would
// have decided otherwise, by direction.
type ShadowStats struct {
	Rule     string `json:"rule"`
	Requests int    `json:"requests"`
	Flipped  int    `json:"flipped"`
	Flips    []Flip `json:"flips"`
}

// Flip counts the requests a shadow rule would have moved from one action
// to another.
type Flip struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count int    `json:"count"`
}

// ChannelStats are the requests one channel decided (see
// Request.Channel) and the spread of their times from request to outcome.
type ChannelStats struct {
	Channel string `json:"channel"`
	Decided int    `json:"decided"`
	// TimeToDecision is the spread of the time from each request to its
	// outcome, in seconds.
	TimeToDecision Spread `json:"time_to_decision"`
}

// ExecutionCounts are what became of approved requests: Claimed those
// whose call was claimed (it was about to run), of which Succeeded and
// Failed were reported so by their claimant and NotReported never were
// (the runner died, never reports, or the call is still running).
type ExecutionCounts struct {
	Approved    int `json:"approved"`
	Claimed     int `json:"claimed"`
	Succeeded   int `json:"succeeded"`
	Failed      int `json:"failed"`
	NotReported int `json:"not_reported"`
}

// ExecutionStats are the ExecutionCounts of the window, and per rule with
// an approved request: most not reported first.
type ExecutionStats struct {
	ExecutionCounts
	Rules []RuleExecution `json:"rules"`
}

// RuleExecution are one rule's ExecutionCounts.
type RuleExecution struct {
	Rule string `json:"rule"`
	ExecutionCounts
}

// ApproverStats are one approver's figures.
type ApproverStats struct {
	Approver string `json:"approver"`
	Stats
}

// RuleStats are one rule's figures.
type RuleStats struct {
	Rule string `json:"rule"`
	Stats
}

// Stats are the figures of one row.
type Stats struct {
	// Requests: for a rule or the total, the requests in the window; for an
	// approver, those that named them or that they voted on.
	Requests int `json:"requests"`
	// Decisions are counted votes, by kind below.
	Decisions int `json:"decisions"`
	Approved  int `json:"approved"` // approve and edit
	Rejected  int `json:"rejected"`
	Responded int `json:"responded"`
	Answered  int `json:"answered"`
	// ApprovalRate is Approved / (Approved + Rejected + Responded); nil
	// when there is no such decision.
	ApprovalRate *float64 `json:"approval_rate"`
	// TimeToDecide is the spread of the decisions' times to decide; nil
	// without decisions.
	TimeToDecide *Spread `json:"time_to_decide"`
	// HighRiskDecisions are the decisions on high and critical risk
	// requests; FastHighRisk those of them faster than the threshold.
	HighRiskDecisions int `json:"high_risk_decisions"`
	FastHighRisk      int `json:"fast_high_risk"`
	// ExpiredUndecided counts requests time decided (see the package doc).
	ExpiredUndecided int `json:"expired_undecided"`
	// GrantsIssued are the standing grants issued in the window (for an
	// approver, those they granted), and GrantUses the calls those grants
	// allowed without a new request (see AddGrants).
	GrantsIssued int `json:"grants_issued"`
	GrantUses    int `json:"grant_uses"`

	seconds []float64 // every time to decide, sorted once the row is done
}

// A row's fast decisions are flagged (ManyFast) when there are at least
// FlagFastMin of them and they are at least FlagFastShare of its decisions
// on high and critical risk.
const (
	FlagFastMin   = 2
	FlagFastShare = 0.5
)

// ManyFast reports whether s's fast decisions on high and critical risk
// are many enough to be flagged: a sign of rubber-stamping.
func (s *Stats) ManyFast() bool {
	return s.FastHighRisk >= FlagFastMin && float64(s.FastHighRisk) >= FlagFastShare*float64(s.HighRiskDecisions)
}

// Seconds returns the row's times to decide in seconds, in ascending order.
func (s *Stats) Seconds() []float64 { return s.seconds }

// Spread is a distribution of times to decide, in seconds.
type Spread struct {
	Min    float64 `json:"min"`
	P25    float64 `json:"p25"`
	Median float64 `json:"median"`
	P75    float64 `json:"p75"`
	P90    float64 `json:"p90"`
	Max    float64 `json:"max"`
}

// HighRisk reports whether risk is high or critical.
func HighRisk(risk string) bool {
	return risk == contracts.RiskHigh || risk == contracts.RiskCritical
}

// TimeToDecide is how long after its request v was made, never negative.
func TimeToDecide(req *Request, v *Vote) time.Duration {
	return max(v.DecidedAt.Sub(req.CreatedAt), 0)
}

// InWindow reports whether a request created at t is in o's window.
func (o Options) InWindow(t time.Time) bool {
	return !t.Before(o.Since) && (o.Until.IsZero() || t.Before(o.Until))
}

// Compute returns the oversight figures of the requests in o's window.
// The order of reqs does not matter.
func Compute(reqs []Request, o Options) Report {
	if o.Fast <= 0 {
		o.Fast = DefaultFast
	}
	rep := newReport(reqs, o)
	approvers := map[string]*ApproverStats{}
	rules := map[string]*RuleStats{}
	approverRow := func(id string) *Stats {
		a := approvers[id]
		if a == nil {
			a = &ApproverStats{Approver: id}
			approvers[id] = a
		}
		return &a.Stats
	}
	for i := range reqs {
		req := &reqs[i]
		if !o.InWindow(req.CreatedAt) {
			continue
		}
		rule := rules[req.Rule]
		if rule == nil {
			rule = &RuleStats{Rule: req.Rule}
			rules[req.Rule] = rule
		}
		rep.Total.add(req, o.Fast)
		rule.add(req, o.Fast)
		// An approver's requests: named by it or voted on, each once.
		seen := map[string]bool{}
		for _, id := range req.Approvers {
			if seen[id] {
				continue
			}
			seen[id] = true
			row := approverRow(id)
			row.Requests++
			if req.TimedOut && !voted(req, id) {
				row.ExpiredUndecided++
			}
		}
		for j := range req.Votes {
			v := &req.Votes[j]
			row := approverRow(v.Approver)
			if !seen[v.Approver] {
				seen[v.Approver] = true
				row.Requests++
			}
			row.count(req, v, o.Fast)
		}
	}
	rep.Total.finish()
	for _, a := range approvers {
		a.finish()
		rep.Approvers = append(rep.Approvers, *a)
	}
	for _, r := range rules {
		r.finish()
		rep.Rules = append(rep.Rules, *r)
	}
	slices.SortFunc(rep.Approvers, func(a, b ApproverStats) int {
		return cmp.Or(cmp.Compare(b.Decisions, a.Decisions), cmp.Compare(b.ExpiredUndecided, a.ExpiredUndecided), cmp.Compare(a.Approver, b.Approver))
	})
	slices.SortFunc(rep.Rules, func(a, b RuleStats) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Rule, b.Rule))
	})
	if rep.Approvers == nil {
		rep.Approvers = []ApproverStats{}
	}
	if rep.Rules == nil {
		rep.Rules = []RuleStats{}
	}
	return rep
}

// newReport is the report of o's window with the rows that are not per
// approver or rule: shadow rules, channels, executions.
func newReport(reqs []Request, o Options) Report {
	return Report{Since: o.Since, Until: o.Until, FastThresholdSeconds: o.Fast.Seconds(), Shadow: shadowRows(reqs, o),
		Channels: channelRows(reqs, o), Execution: executionStats(reqs, o), Reviewers: reviewerRows(reqs, o)}
}

// gated is the action of every request: a call the policy gated.
const gated = "require_approval"

// shadowRows are the shadow rules' figures over the requests in o's
// window. A request was gated: its enforced action is require_approval.
func shadowRows(reqs []Request, o Options) []ShadowStats {
	rows := map[string]*ShadowStats{}
	for i := range reqs {
		if !o.InWindow(reqs[i].CreatedAt) {
			continue
		}
		for _, sh := range reqs[i].Shadow {
			row := rows[sh.Rule]
			if row == nil {
				row = &ShadowStats{Rule: sh.Rule, Flips: []Flip{}}
				rows[sh.Rule] = row
			}
			row.Requests++
			if sh.Action == gated {
				continue
			}
			row.Flipped++
			j := slices.IndexFunc(row.Flips, func(f Flip) bool { return f.To == sh.Action })
			if j < 0 {
				row.Flips = append(row.Flips, Flip{From: gated, To: sh.Action})
				j = len(row.Flips) - 1
			}
			row.Flips[j].Count++
		}
	}
	out := []ShadowStats{}
	for _, r := range rows {
		slices.SortFunc(r.Flips, func(a, b Flip) int { return cmp.Compare(a.To, b.To) })
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ShadowStats) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

// channelRows are the channels' figures over the decided requests of o's
// window.
func channelRows(reqs []Request, o Options) []ChannelStats {
	seconds := map[string][]float64{}
	for i := range reqs {
		if r := &reqs[i]; o.InWindow(r.CreatedAt) && r.Channel != "" {
			seconds[r.Channel] = append(seconds[r.Channel], max(r.DecidedAfter, 0).Seconds())
		}
	}
	out := []ChannelStats{}
	for ch, s := range seconds {
		out = append(out, ChannelStats{Channel: ch, Decided: len(s), TimeToDecision: spreadOf(s)})
	}
	slices.SortFunc(out, func(a, b ChannelStats) int {
		return cmp.Or(cmp.Compare(b.Decided, a.Decided), cmp.Compare(a.Channel, b.Channel))
	})
	return out
}

// executionStats counts what became of the approved requests of o's
// window, in all and per rule.
func executionStats(reqs []Request, o Options) ExecutionStats {
	st := ExecutionStats{Rules: []RuleExecution{}}
	rules := map[string]*ExecutionCounts{}
	for i := range reqs {
		r := &reqs[i]
		if !o.InWindow(r.CreatedAt) || r.Status != contracts.StatusApproved {
			continue
		}
		rule := rules[r.Rule]
		if rule == nil {
			rule = &ExecutionCounts{}
			rules[r.Rule] = rule
		}
		st.add(r)
		rule.add(r)
	}
	for name, c := range rules {
		st.Rules = append(st.Rules, RuleExecution{Rule: name, ExecutionCounts: *c})
	}
	slices.SortFunc(st.Rules, func(a, b RuleExecution) int {
		return cmp.Or(cmp.Compare(b.NotReported, a.NotReported), cmp.Compare(b.Claimed, a.Claimed), cmp.Compare(a.Rule, b.Rule))
	})
	return st
}

func (c *ExecutionCounts) add(r *Request) {
	c.Approved++
	if !r.Claimed {
		return
	}
	c.Claimed++
	switch r.Execution {
	case contracts.ExecutionSucceeded:
		c.Succeeded++
	case contracts.ExecutionFailed:
		c.Failed++
	default:
		c.NotReported++
	}
}

func voted(req *Request, id string) bool {
	return slices.ContainsFunc(req.Votes, func(v Vote) bool { return v.Approver == id })
}

// add counts req and its votes in s, the row of a rule or the total.
func (s *Stats) add(req *Request, fast time.Duration) {
	s.Requests++
	if req.TimedOut {
		s.ExpiredUndecided++
	}
	for j := range req.Votes {
		s.count(req, &req.Votes[j], fast)
	}
}

// count adds decision v on req to s.
func (s *Stats) count(req *Request, v *Vote, fast time.Duration) {
	s.Decisions++
	switch v.Decision {
	case contracts.DecisionApprove, contracts.DecisionEdit:
		s.Approved++
	case contracts.DecisionReject:
		s.Rejected++
	case contracts.DecisionRespond:
		s.Responded++
	case contracts.DecisionAnswer:
		s.Answered++
	}
	d := TimeToDecide(req, v)
	s.seconds = append(s.seconds, d.Seconds())
	if HighRisk(req.Risk) {
		s.HighRiskDecisions++
		if d < fast {
			s.FastHighRisk++
		}
	}
}

// finish computes the rate and the spread once every decision is counted.
func (s *Stats) finish() {
	if n := s.Approved + s.Rejected + s.Responded; n > 0 {
		rate := float64(s.Approved) / float64(n)
		s.ApprovalRate = &rate
	}
	if len(s.seconds) == 0 {
		return
	}
	sp := spreadOf(s.seconds)
	s.TimeToDecide = &sp
}

// spreadOf sorts seconds (not empty) and returns their spread.
func spreadOf(seconds []float64) Spread {
	slices.Sort(seconds)
	return Spread{
		Min: seconds[0], P25: Quantile(seconds, 0.25), Median: Quantile(seconds, 0.5),
		P75: Quantile(seconds, 0.75), P90: Quantile(seconds, 0.9), Max: seconds[len(seconds)-1],
	}
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of sorted, interpolating
// linearly between the closest ranks; NaN when sorted is empty.
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	pos := q * float64(n-1)
	lo := int(math.Floor(pos))
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Human says a time to decide in seconds for people: "0.4s", "4s",
// "2m05s", "3h10m", "2d4h".
func Human(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < 10*time.Second:
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + "s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(math.Round(s)))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// Grant is what the oversight view counts of a standing grant: the rule of
// its issuing approval, who granted it and when, and how many calls it
// has allowed.
type Grant struct {
	Rule      string
	GrantedBy []string
	GrantedAt time.Time
	Uses      int
}

// AddGrants counts the grants issued in r's window (and their uses) into
// the total, each grant's rule and each approver who granted it. Grants
// come from the grants themselves, not from approval records: a rule or
// approver with grants but no request in the window gets a row of its own.
func AddGrants(r *Report, grants []Grant) {
	for _, g := range grants {
		if g.GrantedAt.Before(r.Since) || !r.Until.IsZero() && !g.GrantedAt.Before(r.Until) {
			continue
		}
		r.Total.GrantsIssued++
		r.Total.GrantUses += g.Uses
		rule := ruleRow(r, g.Rule)
		rule.GrantsIssued++
		rule.GrantUses += g.Uses
		for _, who := range g.GrantedBy {
			a := approverRow(r, who)
			a.GrantsIssued++
			a.GrantUses += g.Uses
		}
	}
}

func ruleRow(r *Report, rule string) *Stats {
	for i := range r.Rules {
		if r.Rules[i].Rule == rule {
			return &r.Rules[i].Stats
		}
	}
	r.Rules = append(r.Rules, RuleStats{Rule: rule})
	return &r.Rules[len(r.Rules)-1].Stats
}

func approverRow(r *Report, id string) *Stats {
	for i := range r.Approvers {
		if r.Approvers[i].Approver == id {
			return &r.Approvers[i].Stats
		}
	}
	r.Approvers = append(r.Approvers, ApproverStats{Approver: id})
	return &r.Approvers[len(r.Approvers)-1].Stats
}

package oversight_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api/oversight"
)

func TestQuantileKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		data []float64
		q    float64
		want float64
	}{
		{[]float64{5}, 0, 5},
		{[]float64{5}, 0.5, 5},
		{[]float64{5}, 1, 5},
		{[]float64{10, 20}, 0.5, 15},
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4}, 0.9, 3.7},
		{[]float64{1, 2, 3, 4}, 0.25, 1.75},
		{[]float64{1, 2, 3, 4}, 0.75, 3.25},
		{[]float64{1, 2, 3, 4, 5}, 0.5, 3},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9, 10},
		{[]float64{4, 8, 20, 30, 60, 120, 300}, 0.9, 192},
		{[]float64{0, 100}, 0, 0},
		{[]float64{0, 100}, 1, 100},
	} {
		if got := oversight.Quantile(c.data, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", c.data, c.q, got, c.want)
		}
	}
	if got := oversight.Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile of nothing = %v, want NaN", got)
	}
}

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func vote(approver, decision string, after time.Duration, created time.Time) oversight.Vote {
	return oversight.Vote{Approver: approver, Decision: decision, DecidedAt: created.Add(after)}
}

// knownRequests is a small history with hand-computed figures (below).
func knownRequests() []oversight.Request {
	r := func(id, rule, risk string, created time.Time, approvers []string, timedOut bool, votes ...func(time.Time) oversight.Vote) oversight.Request {
		req := oversight.Request{EventID: id, Rule: rule, Risk: risk, CreatedAt: created, Approvers: approvers, TimedOut: timedOut}
		for _, v := range votes {
			req.Votes = append(req.Votes, v(created))
		}
		return req
	}
	v := func(approver, decision string, after time.Duration) func(time.Time) oversight.Vote {
		return func(created time.Time) oversight.Vote { return vote(approver, decision, after, created) }
	}
	both := []string{"alice", "bob"}
	return []oversight.Request{
		r("r1", "refunds", "high", t0, both, false, v("alice", "approve", 4*time.Second)),
		r("r2", "refunds", "high", t0.Add(time.Hour), both, false, v("bob", "reject", 2*time.Minute)),
		r("r3", "deploys", "critical", t0.Add(2*time.Hour), both, false, v("alice", "approve", 8*time.Second), v("bob", "approve", 30*time.Second)),
		// Quorum of two: alice approved, bob never voted, time decided.
		r("r4", "deploys", "critical", t0.Add(3*time.Hour), both, true, v("alice", "approve", time.Minute)),
		// Open to any approver.
		r("r5", "outbound-email", "medium", t0.Add(4*time.Hour), nil, false, v("carol", "respond", 5*time.Minute)),
		// Before the window.
		r("r6", "refunds", "high", t0.Add(-time.Hour), both, true, v("alice", "approve", time.Second)),
		r("r7", "questions", "low", t0.Add(5*time.Hour), []string{"dave"}, false, v("dave", "answer", 20*time.Second)),
		// A clock that ran behind: never a negative time to decide.
		r("r8", "questions", "low", t0.Add(6*time.Hour), []string{"dave"}, false, v("dave", "answer", -3*time.Second)),
	}
}

func rate(f float64) *float64 { return &f }

func TestComputeKnownAnswers(t *testing.T) {
	rep := oversight.Compute(knownRequests(), oversight.Options{Since: t0, Until: t0.Add(24 * time.Hour), Fast: 10 * time.Second})
	want := oversight.Report{
		Since: t0, Until: t0.Add(24 * time.Hour), FastThresholdSeconds: 10,
		Total: oversight.Stats{
			Requests: 7, Decisions: 8, Approved: 4, Rejected: 1, Responded: 1, Answered: 2, ApprovalRate: rate(4.0 / 6),
			// 0 4 8 20 30 60 120 300
			TimeToDecide:      &oversight.Spread{Min: 0, P25: 7, Median: 25, P75: 75, P90: 174, Max: 300},
			HighRiskDecisions: 5, FastHighRisk: 2, ExpiredUndecided: 1,
		},
		Approvers: []oversight.ApproverStats{
			{Approver: "alice", Stats: oversight.Stats{Requests: 4, Decisions: 3, Approved: 3, ApprovalRate: rate(1),
				TimeToDecide:      &oversight.Spread{Min: 4, P25: 6, Median: 8, P75: 34, P90: 49.6, Max: 60},
				HighRiskDecisions: 3, FastHighRisk: 2}},
			{Approver: "bob", Stats: oversight.Stats{Requests: 4, Decisions: 2, Approved: 1, Rejected: 1, ApprovalRate: rate(0.5),
				TimeToDecide:      &oversight.Spread{Min: 30, P25: 52.5, Median: 75, P75: 97.5, P90: 111, Max: 120},
				HighRiskDecisions: 2, ExpiredUndecided: 1}},
			{Approver: "dave", Stats: oversight.Stats{Requests: 2, Decisions: 2, Answered: 2,
				TimeToDecide: &oversight.Spread{Min: 0, P25: 5, Median: 10, P75: 15, P90: 18, Max: 20}}},
			{Approver: "carol", Stats: oversight.Stats{Requests: 1, Decisions: 1, Responded: 1, ApprovalRate: rate(0),
				TimeToDecide: &oversight.Spread{Min: 300, P25: 300, Median: 300, P75: 300, P90: 300, Max: 300}}},
		},
		Rules: []oversight.RuleStats{
			{Rule: "deploys", Stats: oversight.Stats{Requests: 2, Decisions: 3, Approved: 3, ApprovalRate: rate(1),
				TimeToDecide:      &oversight.Spread{Min: 8, P25: 19, Median: 30, P75: 45, P90: 54, Max: 60},
				HighRiskDecisions: 3, FastHighRisk: 1, ExpiredUndecided: 1}},
			{Rule: "questions", Stats: oversight.Stats{Requests: 2, Decisions: 2, Answered: 2,
				TimeToDecide: &oversight.Spread{Min: 0, P25: 5, Median: 10, P75: 15, P90: 18, Max: 20}}},
			{Rule: "refunds", Stats: oversight.Stats{Requests: 2, Decisions: 2, Approved: 1, Rejected: 1, ApprovalRate: rate(0.5),
				TimeToDecide:      &oversight.Spread{Min: 4, P25: 33, Median: 62, P75: 91, P90: 108.4, Max: 120},
				HighRiskDecisions: 2, FastHighRisk: 1}},
			{Rule: "outbound-email", Stats: oversight.Stats{Requests: 1, Decisions: 1, Responded: 1, ApprovalRate: rate(0),
				TimeToDecide: &oversight.Spread{Min: 300, P25: 300, Median: 300, P75: 300, P90: 300, Max: 300}}},
		},
	}
	if diff := compare(rep, want); diff != "" {
		t.Fatal(diff)
	}
	// Flags: alice made 2 of her 3 high-risk decisions fast; refunds had
	// 1 fast of 2 (below the minimum of 2); the total 2 of 5.
	for _, c := range []struct {
		s    oversight.Stats
		want bool
	}{{rep.Approvers[0].Stats, true}, {rep.Rules[2].Stats, false}, {rep.Total, false}, {rep.Approvers[1].Stats, false}} {
		if got := c.s.ManyFast(); got != c.want {
			t.Errorf("ManyFast(%+v) = %v", c.s, got)
		}
	}
	// The threshold is a strict bound: alice's 8 s is not fast below 8 s.
	rep = oversight.Compute(knownRequests(), oversight.Options{Since: t0, Fast: 8 * time.Second})
	if got := rep.Total.FastHighRisk; got != 1 {
		t.Errorf("fast decisions below 8 s: %d, want 1", got)
	}
	// No threshold given: the default, 10 s.
	if got := oversight.Compute(knownRequests(), oversight.Options{Since: t0}).FastThresholdSeconds; got != 10 {
		t.Errorf("default threshold %v s", got)
	}
	// An empty window: zero figures, no rate, no spread, empty lists.
	empty := oversight.Compute(knownRequests(), oversight.Options{Since: t0.Add(48 * time.Hour)})
	if empty.Total.Requests != 0 || empty.Total.ApprovalRate != nil || empty.Total.TimeToDecide != nil ||
		empty.Approvers == nil || len(empty.Approvers) != 0 || empty.Rules == nil || len(empty.Rules) != 0 {
		t.Errorf("empty window: %+v", empty)
	}
}

// compare says how got differs from want, rounding away float noise.
func compare(got, want oversight.Report) string {
	norm := func(r oversight.Report) string {
		row := func(s oversight.Stats) string {
			out := fmt.Sprintf("req=%d dec=%d ap=%d rej=%d resp=%d ans=%d high=%d fast=%d exp=%d", s.Requests, s.Decisions, s.Approved,
				s.Rejected, s.Responded, s.Answered, s.HighRiskDecisions, s.FastHighRisk, s.ExpiredUndecided)
			if s.ApprovalRate != nil {
				out += fmt.Sprintf(" rate=%.6f", *s.ApprovalRate)
			}
			if p := s.TimeToDecide; p != nil {
				out += fmt.Sprintf(" ttd=[%.6f %.6f %.6f %.6f %.6f %.6f]", p.Min, p.P25, p.Median, p.P75, p.P90, p.Max)
			}
			return out
		}
		out := fmt.Sprintf("window %s..%s fast %v\ntotal %s\n", r.Since, r.Until, r.FastThresholdSeconds, row(r.Total))
		for _, a := range r.Approvers {
			out += "approver " + a.Approver + ": " + row(a.Stats) + "\n"
		}
		for _, ru := range r.Rules {
			out += "rule " + ru.Rule + ": " + row(ru.Stats) + "\n"
		}
		return out
	}
	if g, w := norm(got), norm(want); g != w {
		return "got:\n" + g + "want:\n" + w
	}
	return ""
}

// randomRequests makes n requests over a week after t0 from a fixed seed.
func randomRequests(seed uint64, n int) []oversight.Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	people := []string{"alice", "bob", "carol", "dave", "erin"}
	rules := []string{"refunds", "deploys", "", "outbound-email"}
	risks := []string{contracts.RiskLow, contracts.RiskMedium, contracts.RiskHigh, contracts.RiskCritical}
	decisions := []string{contracts.DecisionApprove, contracts.DecisionEdit, contracts.DecisionReject, contracts.DecisionRespond, contracts.DecisionAnswer}
	out := make([]oversight.Request, n)
	for i := range out {
		created := t0.Add(time.Duration(rng.Int64N(int64(7 * 24 * time.Hour))))
		req := oversight.Request{EventID: fmt.Sprint(i), Rule: rules[rng.IntN(len(rules))], Risk: risks[rng.IntN(len(risks))], CreatedAt: created, TimedOut: rng.IntN(5) == 0}
		for _, p := range people {
			if rng.IntN(2) == 0 {
				req.Approvers = append(req.Approvers, p)
			}
		}
		for _, j := range rng.Perm(len(people))[:rng.IntN(3)] {
			req.Votes = append(req.Votes, vote(people[j], decisions[rng.IntN(len(decisions))], time.Duration(rng.Int64N(int64(2*time.Hour))), created))
		}
		out[i] = req
	}
	return out
}

// TestComputeProperties: every decision belongs to exactly one approver
// and one rule, the rows add up to the total, the order of the records
// does not matter, records outside the window change nothing, and the
// spread is ordered.
func TestComputeProperties(t *testing.T) {
	for seed := range uint64(50) {
		reqs := randomRequests(seed, 1+int(seed)*7)
		o := oversight.Options{Since: t0.Add(24 * time.Hour), Until: t0.Add(5 * 24 * time.Hour), Fast: time.Duration(seed+1) * time.Minute}
		rep := oversight.Compute(reqs, o)

		var inWindow, decisions, fast, high, expired int
		for _, r := range reqs {
			if !o.InWindow(r.CreatedAt) {
				continue
			}
			inWindow++
			decisions += len(r.Votes)
			if r.TimedOut {
				expired++
			}
			for _, v := range r.Votes {
				if oversight.HighRisk(r.Risk) {
					high++
					if oversight.TimeToDecide(&r, &v) < o.Fast {
						fast++
					}
				}
			}
		}
		tot := rep.Total
		if tot.Requests != inWindow || tot.Decisions != decisions || tot.HighRiskDecisions != high || tot.FastHighRisk != fast || tot.ExpiredUndecided != expired {
			t.Fatalf("seed %d: total %+v; want requests %d decisions %d high %d fast %d expired %d", seed, tot, inWindow, decisions, high, fast, expired)
		}
		if tot.Approved+tot.Rejected+tot.Responded+tot.Answered != tot.Decisions {
			t.Fatalf("seed %d: decisions by kind do not add up: %+v", seed, tot)
		}
		sum := func(rows []oversight.Stats) oversight.Stats {
			var s oversight.Stats
			for _, r := range rows {
				s.Requests += r.Requests
				s.Decisions += r.Decisions
				s.Approved += r.Approved
				s.FastHighRisk += r.FastHighRisk
				s.HighRiskDecisions += r.HighRiskDecisions
				s.ExpiredUndecided += r.ExpiredUndecided
			}
			return s
		}
		var byRule, byApprover []oversight.Stats
		for _, r := range rep.Rules {
			byRule = append(byRule, r.Stats)
		}
		for _, a := range rep.Approvers {
			byApprover = append(byApprover, a.Stats)
			if a.ExpiredUndecided > a.Requests || a.Decisions > a.Requests {
				t.Fatalf("seed %d: %s decided or missed more than it was asked: %+v", seed, a.Approver, a.Stats)
			}
		}
		rs, as := sum(byRule), sum(byApprover)
		if rs.Requests != tot.Requests || rs.Decisions != tot.Decisions || rs.Approved != tot.Approved ||
			rs.FastHighRisk != tot.FastHighRisk || rs.HighRiskDecisions != tot.HighRiskDecisions || rs.ExpiredUndecided != tot.ExpiredUndecided {
			t.Fatalf("seed %d: rules add up to %+v, total is %+v", seed, rs, tot)
		}
		if as.Decisions != tot.Decisions || as.Approved != tot.Approved || as.FastHighRisk != tot.FastHighRisk {
			t.Fatalf("seed %d: approvers add up to %+v, total is %+v", seed, as, tot)
		}
		for _, s := range append(append(byRule, byApprover...), tot) {
			if p := s.TimeToDecide; p != nil {
				if !(p.Min <= p.P25 && p.P25 <= p.Median && p.Median <= p.P75 && p.P75 <= p.P90 && p.P90 <= p.Max) || p.Min < 0 {
					t.Fatalf("seed %d: spread out of order: %+v", seed, *p)
				}
				if len(s.Seconds()) != s.Decisions {
					t.Fatalf("seed %d: %d times for %d decisions", seed, len(s.Seconds()), s.Decisions)
				}
			} else if s.Decisions != 0 {
				t.Fatalf("seed %d: decisions without a spread: %+v", seed, s)
			}
			if r := s.ApprovalRate; r != nil && (*r < 0 || *r > 1) {
				t.Fatalf("seed %d: rate %v", seed, *r)
			}
		}

		// Order does not matter.
		shuffled := append([]oversight.Request(nil), reqs...)
		rand.New(rand.NewPCG(seed, 9)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if d := compare(oversight.Compute(shuffled, o), rep); d != "" {
			t.Fatalf("seed %d: order changed the figures:\n%s", seed, d)
		}
		// Only the window counts.
		var inside []oversight.Request
		for _, r := range reqs {
			if o.InWindow(r.CreatedAt) {
				inside = append(inside, r)
			}
		}
		if d := compare(oversight.Compute(inside, o), rep); d != "" {
			t.Fatalf("seed %d: requests outside the window changed the figures:\n%s", seed, d)
		}
	}
}

// TestReportJSON: rows are flat objects, and a missing rate or spread is
// null, not zero.
func TestReportJSON(t *testing.T) {
	rep := oversight.Compute(knownRequests(), oversight.Options{Since: t0, Until: t0.Add(24 * time.Hour)})
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Approvers []map[string]any `json:"approvers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	dave := doc.Approvers[2]
	if dave["approver"] != "dave" || dave["decisions"] != 2.0 || dave["approval_rate"] != nil {
		t.Fatalf("dave's row: %v", dave)
	}
	if _, ok := dave["approval_rate"]; !ok {
		t.Fatalf("no approval_rate member: %v", dave)
	}
	if ttd, _ := dave["time_to_decide"].(map[string]any); ttd["median"] != 10.0 || ttd["p90"] != 18.0 {
		t.Fatalf("dave's time to decide: %v", dave["time_to_decide"])
	}
}

func TestHuman(t *testing.T) {
	for s, want := range map[float64]string{0: "0s", 0.44: "0.4s", 4: "4s", 9.96: "10s", 42.4: "42s", 125: "2m05s", 3600: "1h00m", 11400: "3h10m", 187200: "2d4h"} {
		if got := oversight.Human(s); got != want {
			t.Errorf("Human(%v) = %q, want %q", s, got, want)
		}
	}
}

// Grants issued in the window count, with their uses, for the total, their
// rule and each approver who granted them; a rule or approver with grants
// and no request in the window gets a row; grants outside it do not count.
func TestAddGrants(t *testing.T) {
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	r := oversight.Report{Since: since, Until: since.Add(24 * time.Hour),
		Rules:     []oversight.RuleStats{{Rule: "refunds", Stats: oversight.Stats{Requests: 2}}},
		Approvers: []oversight.ApproverStats{{Approver: "alice", Stats: oversight.Stats{Decisions: 1}}}}
	oversight.AddGrants(&r, []oversight.Grant{
		{Rule: "refunds", GrantedBy: []string{"alice", "bob"}, GrantedAt: since.Add(time.Hour), Uses: 3},
		{Rule: "deploys", GrantedBy: []string{"carol"}, GrantedAt: since.Add(2 * time.Hour), Uses: 0},
		{Rule: "refunds", GrantedBy: []string{"alice"}, GrantedAt: since.Add(-time.Hour), Uses: 9},     // before
		{Rule: "refunds", GrantedBy: []string{"alice"}, GrantedAt: since.Add(24 * time.Hour), Uses: 9}, // after
	})
	if r.Total.GrantsIssued != 2 || r.Total.GrantUses != 3 {
		t.Fatalf("total %d (%d), want 2 (3)", r.Total.GrantsIssued, r.Total.GrantUses)
	}
	rows := map[string][2]int{}
	for _, x := range r.Rules {
		rows["rule "+x.Rule] = [2]int{x.GrantsIssued, x.GrantUses}
	}
	for _, x := range r.Approvers {
		rows["approver "+x.Approver] = [2]int{x.GrantsIssued, x.GrantUses}
	}
	want := map[string][2]int{"rule refunds": {1, 3}, "rule deploys": {1, 0},
		"approver alice": {1, 3}, "approver bob": {1, 3}, "approver carol": {1, 0}}
	if !maps.Equal(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	if r.Rules[0].Requests != 2 || r.Approvers[0].Decisions != 1 {
		t.Fatalf("existing figures changed: %+v %+v", r.Rules[0], r.Approvers[0])
	}
}

package oversight_test

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api/oversight"
)

// A tally's rule rows are Compute's, and its rule and risk rows are
// Compute's over that rule and risk's requests alone; requests outside the
// window count nowhere; a reused request struct changes nothing.
func TestTallyRowsAreComputesRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 37))
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	o := oversight.Options{Since: now.Add(-24 * time.Hour), Until: now, Fast: 10 * time.Second}
	decisions := []string{contracts.DecisionApprove, contracts.DecisionEdit, contracts.DecisionReject, contracts.DecisionRespond, contracts.DecisionAnswer}
	var reqs []oversight.Request
	for i := range 400 {
		created := now.Add(-time.Duration(rng.IntN(30*60)) * time.Minute) // some before the window
		r := oversight.Request{
			EventID: "ev-" + strconv.Itoa(i), Rule: []string{"refunds", "mails", ""}[rng.IntN(3)],
			Risk: []string{"low", "medium", "high", "critical"}[rng.IntN(4)], CreatedAt: created,
			Approvers: []string{"alice", "bob"}[:rng.IntN(3)%3], TimedOut: rng.IntN(9) == 0,
		}
		for range rng.IntN(3) {
			r.Votes = append(r.Votes, oversight.Vote{Approver: []string{"alice", "bob", "carol"}[rng.IntN(3)],
				Decision: decisions[rng.IntN(len(decisions))], DecidedAt: created.Add(time.Duration(rng.IntN(600)) * time.Second)})
		}
		reqs = append(reqs, r)
	}
	tally := oversight.NewTally(o)
	var reused oversight.Request
	for i := range reqs {
		reused = reqs[i]
		tally.Add(&reused)
	}
	same := func(what string, got, want any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("%s:\n tally   %s\n Compute %s", what, g, w)
		}
	}
	rules := map[string]oversight.RuleStats{}
	for _, r := range oversight.Compute(reqs, o).Rules {
		rules[r.Rule] = r
	}
	got := tally.Rules()
	if len(got) != len(rules) {
		t.Fatalf("tally has %d rules, Compute %d", len(got), len(rules))
	}
	for _, r := range got {
		want := rules[r.Rule]
		same("rule "+r.Rule, r, want)
		same("rule "+r.Rule+" times", r.Seconds(), want.Seconds())
	}
	keys, rows := tally.Groups()
	inWindow := 0
	for i, k := range keys {
		var group []oversight.Request
		byDecision := map[string]int{}
		for _, r := range reqs {
			if r.Rule == k.Rule && r.Risk == k.Risk && o.InWindow(r.CreatedAt) {
				group = append(group, r)
				for _, v := range r.Votes {
					byDecision[v.Decision]++
				}
			}
		}
		inWindow += len(group)
		want := oversight.Compute(group, o).Total
		same("rule "+k.Rule+" risk "+k.Risk, rows[i].Stats, want)
		same("rule "+k.Rule+" risk "+k.Risk+" times", rows[i].Seconds(), want.Seconds())
		same("rule "+k.Rule+" risk "+k.Risk+" by decision", rows[i].ByDecision, byDecision)
	}
	if total := oversight.Compute(reqs, o).Total.Requests; inWindow != total || total == 0 || total == len(reqs) {
		t.Fatalf("the tally's groups hold %d requests, the window %d of %d generated: want all of the window's and not every request", inWindow, total, len(reqs))
	}
}

package oversight

import (
	"cmp"
	"slices"

	"github.com/countersign/countersign/contracts"
)

// Review is what the figures need of a request's automated reviewer.
type Review struct {
	Reviewer string
	// ApproveBelow is the rule's approve_below (0: the reviewer advises).
	ApproveBelow int
	// Score is its opinion's score; nil with an error, or before it gave
	// one (Given false).
	Score *int
	Given bool
	// Effect is what the opinion did: contracts.EffectAdvice,
	// EffectApproved or EffectRejected.
	Effect string
}

// DefaultAgreementThreshold is the score below which an advising
// reviewer's opinion counts as "approve" when compared with people's
// decisions (a rule with approve_below uses that).
const DefaultAgreementThreshold = 50

// ReviewerStats are one reviewer's figures over the requests of a window:
// the opinions it gave (with a score) and failed to give (an error: the
// request went to people), the calls it approved or rejected itself, and
// how its advice compares with what people decided.
type ReviewerStats struct {
	Reviewer     string `json:"reviewer"`
	Opinions     int    `json:"opinions"`
	Errors       int    `json:"errors"`
	AutoApproved int    `json:"auto_approved"`
	AutoRejected int    `json:"auto_rejected"`
	// Compared counts the scored opinions on requests people then approved
	// or rejected; Agreed those where a score below the threshold
	// (approve_below, else DefaultAgreementThreshold) met an approval, or
	// one at or above it a rejection. Agreement is Agreed / Compared,
	// absent when nothing was compared.
	Compared  int      `json:"compared"`
	Agreed    int      `json:"agreed"`
	Agreement *float64 `json:"agreement,omitempty"`
}

// reviewerRows are the reviewers' figures over the requests in o's window.
func reviewerRows(reqs []Request, o Options) []ReviewerStats {
	rows := map[string]*ReviewerStats{}
	for i := range reqs {
		req := &reqs[i]
		rv := req.Review
		if rv == nil || !rv.Given || !o.InWindow(req.CreatedAt) {
			continue
		}
		row := rows[rv.Reviewer]
		if row == nil {
			row = &ReviewerStats{Reviewer: rv.Reviewer}
			rows[rv.Reviewer] = row
		}
		if rv.Score == nil {
			row.Errors++
			continue
		}
		row.Opinions++
		switch rv.Effect {
		case contracts.EffectApproved:
			row.AutoApproved++
			continue
		case contracts.EffectRejected:
			row.AutoRejected++
			continue
		}
		if req.Status != contracts.StatusApproved && req.Status != contracts.StatusRejected || req.TimedOut {
			continue // people have not decided it (yet), or time did
		}
		threshold := cmp.Or(rv.ApproveBelow, DefaultAgreementThreshold)
		row.Compared++
		if (*rv.Score < threshold) == (req.Status == contracts.StatusApproved) {
			row.Agreed++
		}
	}
	out := []ReviewerStats{}
	for _, r := range rows {
		if r.Compared > 0 {
			a := float64(r.Agreed) / float64(r.Compared)
			r.Agreement = &a
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ReviewerStats) int {
		return cmp.Or(cmp.Compare(b.Opinions+b.Errors, a.Opinions+a.Errors), cmp.Compare(a.Reviewer, b.Reviewer))
	})
	return out
}

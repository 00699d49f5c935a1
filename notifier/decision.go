package notifier

import (
	"time"

	"github.com/countersign/countersign/contracts"
)

// DecisionChannel is the channel that decided a terminal record: the via
// of the vote that completed it (web, slack, email, push, api, cli, …),
// "timeout" when its deadline decided it, "cancelled" when it was
// cancelled, "" while it is pending. The label of
// countersign_time_to_decision_seconds and of the oversight report's
// time to decision by channel.
func DecisionChannel(rec *contracts.Record) string {
	switch {
	case rec == nil || !rec.Terminal():
		return ""
	case rec.Status == contracts.StatusExpired:
		return "timeout"
	case rec.Status == contracts.StatusCancelled:
		return "cancelled"
	case rec.Outcome == nil:
		return "unknown"
	}
	via := ""
	var last time.Time
	for _, id := range rec.Outcome.DecidedBy {
		if id == contracts.DecidedByTimeout {
			return "timeout"
		}
		for _, v := range rec.Votes {
			if v.Approver.ID == id && !v.DecidedAt.Before(last) {
				via, last = v.Approver.Via, v.DecidedAt
			}
		}
	}
	if via == "" {
		return "unknown"
	}
	return via
}

// TimeToDecision is how long rec took from its request to its outcome
// (0 while pending).
func TimeToDecision(rec *contracts.Record) time.Duration {
	if rec == nil || rec.Outcome == nil || !rec.Terminal() || rec.Outcome.DecidedAt.Before(rec.Request.CreatedAt) {
		return 0
	}
	return rec.Outcome.DecidedAt.Sub(rec.Request.CreatedAt)
}

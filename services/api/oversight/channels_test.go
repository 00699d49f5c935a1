package oversight_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/services/api/oversight"
)

// TestChannelRows: per channel that decided a request of the window, the
// requests it decided and the spread of their times to decision; pending
// requests and requests outside the window count for nothing.
func TestChannelRows(t *testing.T) {
	at := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	req := func(ago time.Duration, status, channel string, after time.Duration) oversight.Request {
		return oversight.Request{EventID: ago.String(), Rule: "payments", CreatedAt: at.Add(-ago), Status: status,
			Channel: channel, DecidedAfter: after}
	}
	reqs := []oversight.Request{
		req(1*time.Hour, "approved", "push", 10*time.Second),
		req(2*time.Hour, "rejected", "push", 30*time.Second),
		req(3*time.Hour, "approved", "push", 20*time.Second),
		req(4*time.Hour, "approved", "email", 40*time.Minute),
		req(5*time.Hour, "expired", "timeout", time.Hour),
		req(6*time.Hour, "pending", "", 0),
		req(48*time.Hour, "approved", "push", time.Second), // before the window
	}
	rep := oversight.Compute(reqs, oversight.Options{Since: at.Add(-24 * time.Hour)})
	want := []oversight.ChannelStats{
		{Channel: "push", Decided: 3, TimeToDecision: oversight.Spread{Min: 10, P25: 15, Median: 20, P75: 25, P90: 28, Max: 30}},
		{Channel: "email", Decided: 1, TimeToDecision: oversight.Spread{Min: 2400, P25: 2400, Median: 2400, P75: 2400, P90: 2400, Max: 2400}},
		{Channel: "timeout", Decided: 1, TimeToDecision: oversight.Spread{Min: 3600, P25: 3600, Median: 3600, P75: 3600, P90: 3600, Max: 3600}},
	}
	if !reflect.DeepEqual(rep.Channels, want) {
		t.Errorf("channel rows %+v\nwant %+v", rep.Channels, want)
	}
	if rep := oversight.Compute(nil, oversight.Options{Since: at}); rep.Channels == nil || len(rep.Channels) != 0 {
		t.Errorf("no request: channels %#v, want []", rep.Channels)
	}
}

// TestExecution: of the approved requests of the window, those claimed,
// and of those what the claimant reported (succeeded, failed) or never
// did; in all and per rule, most not reported first.
func TestExecution(t *testing.T) {
	at := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	n := 0
	req := func(rule, status string, claimed bool, execution string) oversight.Request {
		n++
		return oversight.Request{EventID: string(rune('a' + n)), Rule: rule, CreatedAt: at.Add(-time.Duration(n) * time.Minute),
			Status: status, Claimed: claimed, Execution: execution}
	}
	reqs := []oversight.Request{
		req("deploys", "approved", true, "succeeded"),
		req("deploys", "approved", true, "failed"),
		req("deploys", "approved", true, ""),
		req("deploys", "approved", false, ""),
		req("refunds", "approved", true, ""),
		req("refunds", "approved", true, ""),
		req("refunds", "rejected", false, ""),
		req("reads", "approved", true, "succeeded"),
		req("reads", "expired", false, ""),
	}
	old := req("deploys", "approved", true, "")
	old.CreatedAt = at.Add(-48 * time.Hour) // before the window
	reqs = append(reqs, old)
	rep := oversight.Compute(reqs, oversight.Options{Since: at.Add(-24 * time.Hour)})
	want := oversight.ExecutionStats{
		ExecutionCounts: oversight.ExecutionCounts{Approved: 7, Claimed: 6, Succeeded: 2, Failed: 1, NotReported: 3},
		Rules: []oversight.RuleExecution{
			{Rule: "refunds", ExecutionCounts: oversight.ExecutionCounts{Approved: 2, Claimed: 2, NotReported: 2}},
			{Rule: "deploys", ExecutionCounts: oversight.ExecutionCounts{Approved: 4, Claimed: 3, Succeeded: 1, Failed: 1, NotReported: 1}},
			{Rule: "reads", ExecutionCounts: oversight.ExecutionCounts{Approved: 1, Claimed: 1, Succeeded: 1}},
		},
	}
	if !reflect.DeepEqual(rep.Execution, want) {
		t.Errorf("execution %+v\nwant %+v", rep.Execution, want)
	}
	if rep := oversight.Compute(nil, oversight.Options{Since: at}); rep.Execution.Rules == nil || rep.Execution.Approved != 0 {
		t.Errorf("no request: execution %#v, want zeros and rules []", rep.Execution)
	}
}

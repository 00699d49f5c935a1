package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// TestRunReportsTheOutcome: Run reports how the tool function ended, once,
// as the claimant: succeeded, or failed with the error's text.
func TestRunReportsTheOutcome(t *testing.T) {
	s := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := newClient(t, client.Config{URL: s.url, Token: s.agentToken})
	for _, c := range []struct {
		run    string
		fnErr  error
		status string
	}{
		{"run-outcome-ok", nil, contracts.ExecutionSucceeded},
		{"run-outcome-failed", errors.New("the bank said no"), contracts.ExecutionFailed},
	} {
		run := contracts.Run{ID: c.run, Agent: "billing-bot", RequestedBy: "carol"}
		eventID := approve(ctx, t, s, run, payment)
		res, err := agent.Run(ctx, run, payment, func(context.Context, json.RawMessage) error { return c.fnErr })
		if !errors.Is(err, c.fnErr) || res.OutcomeErr != nil {
			t.Fatalf("%s: run: %v, outcome: %v", c.run, err, res.OutcomeErr)
		}
		rec, _, err := agent.Approval(ctx, eventID, 0)
		if err != nil {
			t.Fatal(err)
		}
		x := rec.Execution
		if x == nil || x.Status != c.status || x.ReportedBy != rec.Claim.By {
			t.Fatalf("%s: execution %+v, claim %+v", c.run, x, rec.Claim)
		}
		if c.fnErr != nil && x.Summary != c.fnErr.Error() {
			t.Fatalf("%s: summary %q", c.run, x.Summary)
		}
		// A second report, under another id, is refused: the outcome is
		// reported once.
		err = agent.Report(ctx, eventID, "another-report", client.Outcome{Status: client.Succeeded})
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.Code != contracts.ReasonOutcomeReported {
			t.Fatalf("%s: a second report: %v", c.run, err)
		}
	}
}

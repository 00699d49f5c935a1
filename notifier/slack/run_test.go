package slack_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
)

// TestApproveRunButton: a tool request of a run that may be approved
// carries "Approve all of this run" behind a confirmation; a request with
// no run, one that may not be approved and a question do not.
func TestApproveRunButton(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  contracts.ApprovalRequested
		want bool
	}{
		{"tool call of a run", toolRequest(t), true},
		{"no run id", toolRequest(t, func(r *contracts.ApprovalRequested) { r.Run.ID = "" }), false},
		{"reject only", toolRequest(t, func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{contracts.DecisionReject} }), false},
		{"question", questionRequest(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake(t)
			m := notify(t, fake, newChannel(t, fake), tt.req)
			noRefusals(t, fake)
			var found *bool
			for _, b := range m.Buttons() {
				if b.ActionID == slack.ActionApproveRun {
					has := strings.Contains(string(m.Blocks), `"confirm"`) && b.Text == "Approve all of this run"
					found = &has
				}
			}
			switch {
			case tt.want && (found == nil || !*found):
				t.Errorf("no confirmed Approve all button: %v", m.Buttons())
			case !tt.want && found != nil:
				t.Errorf("an Approve all button on %s", tt.name)
			}
		})
	}
}

// TestClickApproveRun: the click asks the resolver to approve the clicked
// request's run (its id and agent) as the directory's person via Slack,
// with a batch id that a retry of the same click repeats and another click
// does not; the message then lists each result, and a person not in the
// directory decides nothing.
func TestClickApproveRun(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	other := toolRequest(t, func(r *contracts.ApprovalRequested) { r.EventID = "0190d1a2-7b3c-7def-8123-000000000002" })
	e.res.set(func(r *resolver) {
		r.decideRun = func(runID, agent string, v contracts.Vote) notifier.RunDecision {
			var d notifier.RunDecision
			for i := range 25 {
				rv := notifier.RunVote{Request: &other}
				switch i {
				case 0:
					rv.Counted = true
				case 1:
					rv.Refused, rv.Detail = contracts.ReasonSelfApproval, contracts.Reason(contracts.ReasonSelfApproval).Message()
				default:
					rv.InFlight = true
				}
				d.Votes = append(d.Votes, rv)
			}
			return d
		}
	})
	click := e.fake.Click(signingSecret, e.msg, slack.ActionApproveRun, slackAlice, t0)
	body, _ := io.ReadAll(click.Body)
	serve := func() {
		r := httptest.NewRequest(http.MethodPost, click.URL.String(), bytes.NewReader(body))
		r.Header = click.Header.Clone()
		if w := e.serve(r); w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("HTTP %d %q", w.Code, w.Body)
		}
		e.h.Wait()
	}
	serve()
	serve() // Slack's retry of the same click
	e.click(t, slack.ActionApproveRun, slackAlice)
	e.click(t, slack.ActionApproveRun, slackMallory)

	calls := e.res.RunCalls()
	if len(calls) != 3 {
		t.Fatalf("%d DecideRun calls, want 3 (none for a person not in the directory)", len(calls))
	}
	for _, c := range calls {
		v := c.vote
		if c.runID != "run-42" || c.agent != "billing-agent" || v.Decision != contracts.DecisionApprove ||
			v.Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaSlack}) || !contracts.ValidClientID(v.VoteID) {
			t.Errorf("DecideRun(%q, %q, %+v)", c.runID, c.agent, v)
		}
	}
	if calls[0].vote.VoteID != calls[1].vote.VoteID || calls[1].vote.VoteID == calls[2].vote.VoteID {
		t.Errorf("batch ids %s %s %s: want a retry's the same, another click's new", calls[0].vote.VoteID, calls[1].vote.VoteID, calls[2].vote.VoteID)
	}
	if len(e.res.Votes()) != 0 {
		t.Errorf("single votes cast: %+v", e.res.Votes())
	}
	text := joined(e.current(t).Texts())
	for _, want := range []string{
		"alice approved all of run run-42:* 1 counted, 1 refused, 23 in flight",
		"(approval " + other.EventID + "): counted",
		"(approval " + other.EventID + "): refused, " + contracts.Reason(contracts.ReasonSelfApproval).Message(),
		"(approval " + other.EventID + "): in flight, not yet counted",
		fmt.Sprintf("… and %d more", 5),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the message lacks %q:\n%s", want, text)
		}
	}
	if !e.current(t).HasActions() {
		t.Error("the clicked request is still pending, but its buttons are gone")
	}
	if eph := e.ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], "not in the Countersign directory") {
		t.Errorf("ephemerals %q", eph)
	}
	noRefusals(t, e.fake)
}

package notifiertest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// The suite's clock and links.
var (
	suiteNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	// suiteURL is where the suite says the Countersign server is.
	suiteURL = "https://countersign.example.test"
)

const (
	toolName = "send_payment"
	summary  = "Pay 250 EUR to acme"
	// rejectComment is the reason of the rejected outcome; the update
	// shows it.
	rejectComment = "over the monthly limit"
	rejecter      = "bob"
)

var paymentArgs = json.RawMessage(`{"amount":250,"currency":"EUR","to":"acme"}`)

// eventID is the n-th approval of the suite (a UUIDv7-shaped id), so that
// every outcome a behaviour sends is about an approval of its own.
func eventID(n int) string {
	return fmt.Sprintf("0190d1a2-7b3c-7def-8123-%012d", 456789000+n)
}

// request is the n-th pending payment approval, reaching channel.
func request(n int, channel string) contracts.ApprovalRequested {
	sha, err := contracts.ArgumentsSHA256(paymentArgs)
	if err != nil {
		panic(err) // the arguments are a constant
	}
	return contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: eventID(n),
		Kind:    contracts.KindToolApproval,
		Run:     contracts.Run{ID: "run-42", Agent: "billing-agent", RequestedBy: "dave"},
		ToolCall: &contracts.ToolCall{
			ID: "call-1", Name: toolName, Arguments: paymentArgs, ArgumentsSHA256: sha,
		},
		Risk:             contracts.RiskMedium,
		Summary:          summary,
		Policy:           contracts.PolicyRef{Rule: "payments", Version: "7"},
		Quorum:           contracts.Quorum{Required: 1, Approvers: []string{"alice", "bob"}, Veto: true, Order: contracts.OrderAny},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		Channels:         []string{channel},
		ExpiresAt:        suiteNow.Add(time.Hour),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        suiteNow,
	}
}

// pending is req's record before any vote.
func pending(req contracts.ApprovalRequested) *contracts.Record {
	return &contracts.Record{
		Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusPending,
		ExpiresAt: req.ExpiresAt, UpdatedAt: suiteNow,
	}
}

// outcome is req decided with status: approved by alice, rejected by bob
// with rejectComment, expired, or cancelled by its requester.
func outcome(req contracts.ApprovalRequested, status string) contracts.Record {
	rec := *pending(req)
	rec.Status = status
	at := suiteNow.Add(3 * time.Minute)
	rec.UpdatedAt = at
	switch status {
	case contracts.StatusApproved:
		rec.Votes = []contracts.Vote{{VoteID: "v-alice", EventID: req.EventID, Decision: contracts.DecisionApprove,
			Approver: contracts.Approver{ID: "alice", Via: contracts.ViaWeb}, DecidedAt: at}}
		rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, DecidedBy: []string{"alice"}, DecidedAt: at}
	case contracts.StatusRejected:
		rec.Votes = []contracts.Vote{{VoteID: "v-bob", EventID: req.EventID, Decision: contracts.DecisionReject,
			Approver: contracts.Approver{ID: rejecter, Via: contracts.ViaWeb}, Comment: rejectComment, DecidedAt: at}}
		rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionReject, Comment: rejectComment,
			DecidedBy: []string{rejecter}, DecidedAt: at}
	case contracts.StatusCancelled:
		rec.Outcome = &contracts.Outcome{DecidedBy: []string{"dave"}, DecidedAt: at}
	}
	return rec
}

// terminalStatuses are the outcomes every channel must be able to show.
var terminalStatuses = []string{
	contracts.StatusApproved, contracts.StatusRejected, contracts.StatusExpired, contracts.StatusCancelled,
}

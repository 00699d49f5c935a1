package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// A Go agent with nothing but the API's URL and a token gates a payment:
// Run reviews it, waits while a human decides, claims the approval and
// calls the tool once with the approved arguments. Running the same call
// again (a retry, another worker, a restart) does not pay twice.
func ExampleClient_Run() {
	stack, stop := startExampleStack()
	defer stop()
	stack.aliceDecides(client.Vote{Decision: contracts.DecisionApprove, Comment: "invoice checked"})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(client.Config{URL: stack.url, Token: stack.agentToken})
	if err != nil {
		panic(err)
	}
	run := contracts.Run{ID: "run-1", Agent: "billing-bot", RequestedBy: "carol"}
	call := client.ToolCall{ID: "call-1", Name: "payments.send",
		Arguments: json.RawMessage(`{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`)}
	pay := func(ctx context.Context, args json.RawMessage) error {
		fmt.Println("paying", string(args))
		return nil
	}

	res, err := c.Run(ctx, run, call, pay)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Verdict, "by rule", res.Rule)

	res, err = c.Run(ctx, run, call, pay)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Verdict)
	// Output:
	// paying {"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}
	// allowed by rule payments
	// already_executed
}

// The steps of Run, one by one, for a runtime that suspends a run between
// review and decision: Review answers at once, Wait blocks until decided,
// and Claim marks the approval used right before the tool runs. A claim
// retried with its own claim id (after a lost answer) succeeds again; any
// other claim is refused.
func ExampleClient_Claim() {
	stack, stop := startExampleStack()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(client.Config{URL: stack.url, Token: stack.agentToken})
	if err != nil {
		panic(err)
	}
	run := contracts.Run{ID: "run-2", Agent: "billing-bot", RequestedBy: "carol"}
	calls := []client.ToolCall{{ID: "call-1", Name: "payments.send",
		Arguments: json.RawMessage(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH"}`)}}

	results, err := c.Review(ctx, run, calls)
	if err != nil {
		panic(err)
	}
	fmt.Println("review:", results[0].Verdict)
	// Alice approves once the review has answered (pending), as a person would.
	stack.aliceDecides(client.Vote{Decision: contracts.DecisionApprove})
	results, err = c.Wait(ctx, run, calls)
	if err != nil {
		panic(err)
	}
	fmt.Println("wait:", results[0].Verdict)

	claimID := client.NewClaimID() // keep it with the run, to retry the claim
	_, err = c.Claim(ctx, results[0].EventID, claimID)
	fmt.Println("claim:", err)
	_, err = c.Claim(ctx, results[0].EventID, claimID)
	fmt.Println("the same claim again:", err)
	_, err = c.Claim(ctx, results[0].EventID, client.NewClaimID())
	fmt.Println("another claim already claimed:", errors.Is(err, client.ErrAlreadyClaimed))
	// Output:
	// review: pending
	// wait: allowed
	// claim: <nil>
	// the same claim again: <nil>
	// another claim already claimed: true
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// An agent proposes three calls: the policy allows the search, denies the
// shell command, and holds the payment until a human approves it. Review
// returns when every call has its verdict; an allowed call is claimed right
// before it runs.
func ExampleGate_Review() {
	stack, stop := startExampleStack()
	defer stop()
	stack.humanDecides("alice", contracts.Vote{Decision: contracts.DecisionApprove, Comment: "invoice checked"})
	gate := stack.gate

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "run-1", Agent: "billing-bot", RequestedBy: "carol"}
	verdicts, err := gate.Review(ctx, run, []orchestrator.ToolCall{
		{ID: "call-1", Name: "search_web", Arguments: json.RawMessage(`{"q":"Globex invoice"}`)},
		{ID: "call-2", Name: "shell.exec", Arguments: json.RawMessage(`{"cmd":"rm -rf /tmp/invoices"}`)},
		{ID: "call-3", Name: "payments.send", Arguments: json.RawMessage(`{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`)},
	})
	if err != nil {
		panic(err)
	}
	for _, v := range verdicts {
		switch v.Verdict {
		case orchestrator.VerdictAllowed:
			if err := v.Permit.Claim(ctx); err != nil {
				fmt.Println(v.ToolCallID, "must not run:", err)
				continue
			}
			fmt.Println(v.ToolCallID, "runs with", string(v.Arguments), "by rule", v.Rule)
		default:
			fmt.Println(v.ToolCallID, v.Verdict, "by rule", v.Rule+":", v.Reason)
		}
	}
	// Output:
	// call-1 runs with {"q":"Globex invoice"} by rule read-only-tools
	// call-2 denied by rule no-shell: Agents may not run shell commands.
	// call-3 runs with {"amount":1250,"currency":"EUR","recipient":"Globex GmbH"} by rule payments
}

// ReviewAsync parks a run instead of blocking a goroutine on it: done is
// called once, when the last gated call is decided. Here a human rejects
// the payment, and the reason is the tool result for the model.
func ExampleGate_ReviewAsync() {
	stack, stop := startExampleStack()
	defer stop()
	stack.humanDecides("alice", contracts.Vote{Decision: contracts.DecisionReject, Comment: "wrong account"})
	gate := stack.gate

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "run-2", Agent: "billing-bot", RequestedBy: "carol"}
	calls := []orchestrator.ToolCall{
		{ID: "call-1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":90000,"currency":"EUR","recipient":"Initech"}`)},
	}
	done := make(chan struct{})
	err := gate.ReviewAsync(ctx, run, calls, func(verdicts []orchestrator.Verdict, err error) {
		defer close(done)
		if err != nil {
			fmt.Println("no verdict:", err) // ctx ended first
			return
		}
		for _, v := range verdicts { // resume the run
			fmt.Println(v.ToolCallID, v.Verdict)
			fmt.Println(v.Reason)
		}
	})
	if err != nil {
		panic(err)
	}
	<-done
	// Output:
	// call-1 denied
	// A human reviewer rejected this tool call. Reason: wrong account
}

// A permit runs its call at most once in the whole fleet: of two workers
// that re-attach to the same approval, only the first to claim may run the
// tool, and a later review says the call was already executed.
func ExamplePermit_Claim() {
	stack, stop := startExampleStack()
	defer stop()
	stack.humanDecides("alice", contracts.Vote{Decision: contracts.DecisionApprove})
	gate := stack.gate

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "run-3", Agent: "billing-bot", RequestedBy: "carol"}
	calls := []orchestrator.ToolCall{
		{ID: "call-1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH"}`)},
	}
	first, err := gate.Review(ctx, run, calls) // one worker
	if err != nil {
		panic(err)
	}
	second, err := gate.Review(ctx, run, calls) // another, on the same run and call
	if err != nil {
		panic(err)
	}

	fmt.Println("first claim:", first[0].Permit.Claim(ctx))
	err = second[0].Permit.Claim(ctx)
	fmt.Println("second claim already executed:", errors.Is(err, orchestrator.ErrAlreadyExecuted))
	again, err := gate.Review(ctx, run, calls)
	if err != nil {
		panic(err)
	}
	fmt.Println("a later review:", again[0].Verdict, again[0].Permit == nil)
	// Output:
	// first claim: <nil>
	// second claim already executed: true
	// a later review: already_executed true
}

// An agent asks a human instead of proposing a call; the answer's content
// satisfies the question's schema and is the tool result for the model.
func ExampleGate_Ask() {
	stack, stop := startExampleStack()
	defer stop()
	stack.humanDecides("alice", contracts.Vote{Decision: contracts.DecisionAnswer,
		Answer: &contracts.Answer{Action: orchestrator.ActionAccept, Content: json.RawMessage(`{"city":"Lisbon","nights":3}`)}})
	gate := stack.gate

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := contracts.Run{ID: "run-4", Agent: "travel-bot"}
	ans, err := gate.Ask(ctx, run, orchestrator.Question{
		ID:     "call-7",
		Text:   "Which city should I book for the offsite?",
		Schema: json.RawMessage(`{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"nights":{"type":"integer","minimum":1}}}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(ans.Status, "by", ans.AnsweredBy)
	fmt.Println(ans.ToolResult())
	// Output:
	// answered by alice
	// {"city":"Lisbon","nights":3}
}

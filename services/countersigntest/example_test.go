package countersigntest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/countersigntest"
)

// A deploy waits eight hours for an approval nobody gives, in no wall time:
// the gate and the arbiter read the fake clock, and advancing it fires the
// request's expiry as the server would.
func ExampleClock() {
	clock := countersigntest.NewClock(time.Now())
	stack, err := countersigntest.StartStack(`
version: "example-clock"
rules:
  - name: deploys
    tools: [deploy]
    action: require_approval
    approvers: [alice]
    timeout: 8h
`, countersigntest.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := stack.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	js, err := stack.JetStream(embedded.RoleOrchestrator)
	if err != nil {
		panic(err)
	}
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: js, Policy: orchestrator.StaticPolicy{P: stack.Policy}, Now: clock.Now})
	if err != nil {
		panic(err)
	}
	defer gate.Close()

	run := contracts.Run{ID: "run-1", Agent: "deploy-bot"}
	call := orchestrator.ToolCall{ID: "deploy-1", Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)}
	verdicts := make(chan []orchestrator.Verdict, 1)
	if err := gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			panic(err)
		}
		verdicts <- v
	}); err != nil {
		panic(err)
	}
	// The arbiter schedules the expiry once it has the request; then eight
	// hours pass.
	if err := clock.WaitScheduled(ctx, orchestrator.EventID(run, call.ID), contracts.TimerExpire, clock.Now().Add(8*time.Hour)); err != nil {
		panic(err)
	}
	if err := clock.Advance(ctx, 8*time.Hour); err != nil {
		panic(err)
	}
	fmt.Println((<-verdicts)[0].Verdict)
	// Output: expired
}

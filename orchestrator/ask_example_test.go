package orchestrator_test

import (
	"encoding/json"
	"fmt"

	"github.com/countersign/countersign/orchestrator"
)

// A model called request_human_input; the call becomes a Question for
// Gate.Ask, and the Answer becomes the tool result the model reads.
func ExampleQuestionFromToolCall() {
	fmt.Println(string(orchestrator.RequestHumanInputTool.JSON())[:36])

	q, err := orchestrator.QuestionFromToolCall("call-7", json.RawMessage(`{"question":"Which city should I book?"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(q.ID, q.Text)

	// What gate.Ask(ctx, run, q) returns once a human has answered:
	accepted := orchestrator.Answer{Status: orchestrator.VerdictAnswered, Action: orchestrator.ActionAccept,
		Content: json.RawMessage(`{"text":"Lisbon"}`)}
	declined := orchestrator.Answer{Status: orchestrator.VerdictAnswered, Action: orchestrator.ActionDecline}
	fmt.Println(accepted.ToolResult())
	fmt.Println(declined.ToolResult())
	// Output:
	// {"name":"request_human_input","descr
	// call-7 Which city should I book?
	// {"text":"Lisbon"}
	// The human declined to answer this question.
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// TestGateRefusesWhatDoesNotFit: arguments, a schema or a question one byte
// over the size budget are refused with ErrTooLarge (too_large) and nothing
// is published, not even the calls before the bad one.
func TestGateRefusesWhatDoesNotFit(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	lim := contracts.LimitsFor(contracts.DefaultMaxPayload)
	args := func(n int) json.RawMessage {
		return json.RawMessage(`{"blob":"` + strings.Repeat("x", n-len(`{"blob":""}`)) + `"}`)
	}
	run := contracts.Run{ID: "run-big", Agent: "billing-bot"}
	_, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{
		{ID: "fine", Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)},
		{ID: "over", Name: "deploy", Arguments: args(lim.Arguments + 1)},
	})
	if !errors.Is(err, orchestrator.ErrTooLarge) || !errors.Is(err, contracts.ErrTooLarge) {
		t.Fatalf("Submit: %v, want ErrTooLarge", err)
	}
	schema := json.RawMessage(`{"type":"object","description":"` + strings.Repeat("d", lim.Schema) + `"}`)
	if _, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "schema", Name: "deploy", Schema: schema}}); !errors.Is(err, orchestrator.ErrTooLarge) {
		t.Fatalf("Submit with a schema over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := e.gate.SubmitQuestion(ctx, run, orchestrator.Question{ID: "q", Text: strings.Repeat("q", contracts.MaxQuestionTextBytes+1)}); !errors.Is(err, orchestrator.ErrTooLarge) {
		t.Fatalf("SubmitQuestion over the limit: %v, want ErrTooLarge", err)
	}
	s, err := e.js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, contracts.SubjectToolRequestedPrefix+">"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a request was published: %v", err)
	}
	v, err := e.gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "max", Name: "deploy", Arguments: args(lim.Arguments)}})
	if err != nil || v[0].Verdict != orchestrator.VerdictPending {
		t.Fatalf("arguments at the limit: %+v, %v", v, err)
	}
}

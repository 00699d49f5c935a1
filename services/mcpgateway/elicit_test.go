package mcpgateway_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/mcpgateway"
)

// elicited is what ask_name's upstream received: the elicitation result,
// decoded from the tool's text.
func elicited(t *testing.T, res *mcp.CallToolResult) mcp.ElicitResult {
	t.Helper()
	var got mcp.ElicitResult
	if res == nil || res.IsError || json.Unmarshal([]byte(strings.TrimSpace(text(res))), &got) != nil {
		t.Fatalf("ask_name: %s", text(res))
	}
	return got
}

// An upstream's elicitation goes to a client that supports elicitation: on
// protocol 2026-07-28 as an input request in the answer to its tools/call
// (the client calls again with the answer), on earlier versions as
// elicitation/create. Either way the upstream receives exactly the client's
// answer, and no human-input request is opened.
func TestElicitationGoesToTheClient(t *testing.T) {
	r := newRig(t, nil)
	for _, version := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			asked := make(chan *mcp.ElicitParams, 1)
			answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada " + version, "n": 3.5}}
			cs := r.connect(t, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked <- req.Params
					return answer, nil
				},
			}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s, want %s", got, version)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
			if err != nil {
				t.Fatal(err)
			}
			q := receive(t, asked)
			if q.Message != "Which name?" || !strings.Contains(mustJSON(t, q.RequestedSchema), `"name"`) {
				t.Fatalf("the client was asked %+v", q)
			}
			if got := elicited(t, res); got.Action != "accept" || !reflect.DeepEqual(got.Content, answer.Content) {
				t.Fatalf("the upstream received %+v, the client answered %+v", got, answer)
			}
		})
	}
	for _, rec := range r.serve.approvals(t, r.runID) {
		if rec.Request.Kind == contracts.KindHumanInput {
			t.Fatalf("a human-input request was opened: %+v", rec.Request.Question)
		}
	}
}

// On protocol 2026-07-28 the gateway answers the first tools/call with
// resultType input_required, the upstream's question and a requestState;
// the upstream's call is held until the client calls again with the answer.
// A requestState the gateway does not know, or one used with other
// arguments, is refused and reaches no upstream.
func TestElicitationRoundTripOnTheWire(t *testing.T) {
	r := newRig(t, nil)
	cs := r.connect(t, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("the client handler was called with the round trip disabled")
			return nil, nil
		},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}, nil)
	ctx := t.Context()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" || len(first.Content) != 0 {
		t.Fatalf("first answer: %+v", first)
	}
	var id string
	for k, v := range first.InputRequests {
		id = k
		if p, ok := v.(*mcp.ElicitParams); !ok || p.Message != "Which name?" {
			t.Fatalf("input request %s: %#v", k, v)
		}
	}
	answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "other"},
		InputResponses: mcp.InputResponseMap{id: answer}, RequestState: first.RequestState})
	if err == nil || !strings.Contains(err.Error(), "must be those of the call") {
		t.Fatalf("other arguments: %v", err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "x"},
		InputResponses: mcp.InputResponseMap{id: answer}, RequestState: "forged"})
	if err == nil || !strings.Contains(err.Error(), "names no call waiting") {
		t.Fatalf("unknown requestState: %v", err)
	}
	again, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "x"}, RequestState: first.RequestState})
	if err != nil || !again.NeedsInput() || again.InputRequests[id] == nil {
		t.Fatalf("no answer given: the question is asked again: %+v %v", again, err)
	}
	last, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "x"},
		InputResponses: mcp.InputResponseMap{id: answer}, RequestState: first.RequestState})
	if err != nil || last.NeedsInput() {
		t.Fatalf("answered: %+v %v", last, err)
	}
	if got := elicited(t, last); got.Action != "accept" || got.Content["name"] != "Grace" {
		t.Fatalf("the upstream received %+v", got)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{"id": "x"},
		InputResponses: mcp.InputResponseMap{id: answer}, RequestState: first.RequestState})
	if err == nil || !strings.Contains(err.Error(), "names no call waiting") {
		t.Fatalf("a finished call's requestState: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A question the client does not answer within InputWait is cancelled: the
// upstream receives action "cancel", and the call's requestState is no
// longer accepted.
func TestUnansweredQuestionIsCancelled(t *testing.T) {
	r := newRig(t, func(c *mcpgateway.Config) { c.InputWait = 200 * time.Millisecond })
	cs := r.connect(t, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	}, nil)
	first, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
	if err != nil || !first.NeedsInput() {
		t.Fatalf("first answer: %+v %v", first, err)
	}
	if got := receive(t, r.notes.answers); got != `{"action":"cancel"}` {
		t.Fatalf("the upstream received %s", got)
	}
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{},
		InputResponses: mcp.InputResponseMap{"elicitation-1": &mcp.ElicitResult{Action: "accept"}}, RequestState: first.RequestState})
	if err == nil || !strings.Contains(err.Error(), "names no call waiting") {
		t.Fatalf("an expired requestState: %v", err)
	}
}

package codingagent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeResponses is a scripted OpenAI Responses API for Codex: the first
// turn of a run answers with one exec_command call of the script's
// command, the turn that carries its output with a closing message. It
// streams as the real API does (server-sent events) and refuses, as the
// real API would, a request without the key, for another model, without
// streaming, or that offers no exec_command tool.
type fakeResponses struct {
	t          *testing.T
	key, model string
	srv        *httptest.Server

	mu      sync.Mutex
	command string
	outputs []string // the function_call_output of each later turn
	turns   int
}

func newFakeResponses(t *testing.T) *fakeResponses {
	f := &fakeResponses{t: t, key: "sk-test-" + strings.ReplaceAll(t.Name(), "/", "-"), model: "gpt-5"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// play sets the command the model asks to run.
func (f *fakeResponses) play(command string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.command, f.outputs, f.turns = command, nil, 0
}

// output is what the agent told the model the command did (the tool's
// output, or why it did not run).
func (f *fakeResponses) output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.outputs) == 0 {
		f.t.Fatal("the agent never reported the command's result to the model")
	}
	return f.outputs[len(f.outputs)-1]
}

type responsesRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Input  []struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
	} `json:"input"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

func (f *fakeResponses) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		f.t.Errorf("fake Responses API refused %s %s: %s", r.Method, r.URL, msg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":%q}}`, msg)
	}
	var req responsesRequest
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/v1/responses":
		fail(http.StatusNotFound, "no route "+r.URL.Path)
		return
	case r.Header.Get("Authorization") != "Bearer "+f.key:
		fail(http.StatusUnauthorized, "invalid api key")
		return
	case json.NewDecoder(r.Body).Decode(&req) != nil:
		fail(http.StatusBadRequest, "body is not JSON")
		return
	case req.Model != f.model || !req.Stream:
		fail(http.StatusBadRequest, "want model "+f.model+" and stream")
		return
	case !slices.ContainsFunc(req.Tools, func(t struct {
		Name string `json:"name"`
	}) bool {
		return t.Name == "exec_command"
	}):
		fail(http.StatusBadRequest, "no exec_command tool offered")
		return
	}
	f.mu.Lock()
	f.turns++
	id := fmt.Sprintf("resp_%d", f.turns)
	var item map[string]any
	answered := false
	for _, in := range req.Input {
		if in.Type == "function_call_output" && in.CallID == "call_1" {
			answered = true
			f.outputs = append(f.outputs, outputText(in.Output))
		}
	}
	if answered || f.command == "" {
		item = map[string]any{"type": "message", "id": "msg_" + id, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": closingText, "annotations": []any{}}}}
	} else {
		args, _ := json.Marshal(map[string]string{"cmd": f.command})
		item = map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_1", "name": "exec_command",
			"arguments": string(args), "status": "completed"}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b)
		w.(http.Flusher).Flush()
	}
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	send(map[string]any{"type": "response.completed", "response": map[string]any{"id": id, "usage": map[string]any{
		"input_tokens": 100, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": 1, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": 101}}})
}

// outputText is a function_call_output's text: a string, or the text
// parts of a list.
func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

package codingagent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeModel is a scripted Anthropic Messages API: it answers the n-th turn
// of the agent since the script was set with the n-th tool use of the
// script, and the turn after the last with a closing text. It streams as the real
// API does (server-sent events) and refuses, as the real API would, a
// request without the key, the version header, the model it serves, or
// streaming.
type fakeModel struct {
	t          *testing.T
	key, model string
	srv        *httptest.Server

	mu       sync.Mutex
	script   []toolUse
	turn     int // of the agent, since the script was set
	requests []messagesRequest
}

// toolUse is one tool call the model makes.
type toolUse struct {
	ID, Name string
	Input    map[string]any
}

// closingText is what the model says once its script is done.
const closingText = "All done."

type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens int               `json:"max_tokens"`
	Stream    bool              `json:"stream"`
	Messages  []json.RawMessage `json:"messages"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// toolResult is a tool_result block of a request.
type toolResult struct {
	ID      string
	Text    string
	IsError bool
}

func newFakeModel(t *testing.T) *fakeModel {
	f := &fakeModel{t: t, key: "sk-ant-test-" + t.Name(), model: "claude-sonnet-4-5"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// play sets the script of tool uses.
func (f *fakeModel) play(script ...toolUse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script, f.turn = script, 0
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, typ, msg string) {
		f.t.Errorf("fake Messages API refused %s %s: %s", r.Method, r.URL, msg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
	}
	var req messagesRequest
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/v1/messages":
		fail(http.StatusNotFound, "not_found_error", "no route "+r.URL.Path)
		return
	case r.Header.Get("X-Api-Key") != f.key:
		fail(http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	case r.Header.Get("Anthropic-Version") != "2023-06-01":
		fail(http.StatusBadRequest, "invalid_request_error", "anthropic-version: "+r.Header.Get("Anthropic-Version"))
		return
	case json.NewDecoder(r.Body).Decode(&req) != nil:
		fail(http.StatusBadRequest, "invalid_request_error", "body is not JSON")
		return
	case req.Model != f.model:
		fail(http.StatusNotFound, "not_found_error", "model: "+req.Model)
		return
	case !req.Stream || req.MaxTokens <= 0 || len(req.Messages) == 0:
		fail(http.StatusBadRequest, "invalid_request_error", "want stream, max_tokens and messages")
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	var next *toolUse
	if offersTools(req) {
		if f.turn < len(f.script) {
			next = &f.script[f.turn]
		}
		f.turn++
	}
	id := fmt.Sprintf("msg_%s_%d", f.t.Name(), len(f.requests))
	f.mu.Unlock()
	streamMessage(w, id, f.model, next)
}

// offersTools reports whether the request is the agent's own turn (it
// offers Bash), not a side request of the CLI's.
func offersTools(req messagesRequest) bool {
	for _, t := range req.Tools {
		if t.Name == "Bash" {
			return true
		}
	}
	return false
}

// streamMessage streams one assistant message: the tool use, or the
// closing text when next is nil.
func streamMessage(w http.ResponseWriter, id, model string, next *toolUse) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		w.(http.Flusher).Flush()
	}
	usage := map[string]int{"input_tokens": 100, "output_tokens": 1}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
	stop := "end_turn"
	if next != nil {
		stop = "tool_use"
		input, _ := json.Marshal(next.Input)
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": next.ID, "name": next.Name, "input": map[string]any{}}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	} else {
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": closingText}})
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 20}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// toolResults are the tool_result blocks of a request's conversation.
func toolResults(req messagesRequest) []toolResult {
	var out []toolResult
	for _, raw := range req.Messages {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Role != "user" || json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				out = append(out, toolResult{ID: b.ToolUseID, Text: blockText(b.Content), IsError: b.IsError})
			}
		}
	}
	return out
}

// blockText is a tool result's content as text: a string, or its text
// blocks.
func blockText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, x := range blocks {
		b.WriteString(x.Text)
	}
	return b.String()
}

// lastResults are the tool results of the last request the model got.
func (f *fakeModel) lastResults(t *testing.T) []toolResult {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the model got no request")
	}
	return toolResults(f.requests[len(f.requests)-1])
}

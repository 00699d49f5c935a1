package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/countersign/countersign/orchestrator/policy"
)

// RequestHumanInputToolName is the name of the ready-made tool that lets a
// model ask a human, and the tool name policy rules match questions by.
const RequestHumanInputToolName = policy.HumanInputTool

// ToolDefinition describes a tool to a model: the shape every LLM API takes
// (OpenAI "function", Anthropic "tool", MCP "tool"), with the JSON Schema of
// its input.
type ToolDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// JSON is the definition as JSON, ready to register with a model.
func (t ToolDefinition) JSON() []byte {
	out, _ := json.Marshal(t)
	return out
}

// RequestHumanInputTool is the definition of request_human_input. Register
// it with the model; when the model calls it, turn the call into a Question
// with QuestionFromToolCall, Ask it, and hand Answer.ToolResult back as the
// tool result.
var RequestHumanInputTool = ToolDefinition{
	Name: RequestHumanInputToolName,
	Description: "Ask a human a question and wait for the answer. Use it when you need a decision, " +
		"a missing fact or a confirmation that only a person can give; do not guess instead. " +
		"The answer may take minutes or hours. The result is the human's answer as JSON, or a " +
		"sentence saying that they declined or that nobody answered.",
	InputSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "question": {
      "type": "string",
      "minLength": 1,
      "description": "The question, complete and self-contained: the human has not seen this conversation."
    },
    "answer_schema": {
      "type": "object",
      "description": "Optional JSON Schema of the answer, for structured answers: an object whose properties are strings, numbers, integers, booleans or enums. Without it the answer is {\"text\": \"...\"}."
    }
  },
  "required": ["question"],
  "additionalProperties": false
}`),
}

// QuestionFromToolCall turns the arguments of a request_human_input call
// into a Question; id is the tool call's id, so a re-run re-attaches.
func QuestionFromToolCall(id string, arguments json.RawMessage) (Question, error) {
	var in struct {
		Question     string          `json:"question"`
		AnswerSchema json.RawMessage `json:"answer_schema"`
	}
	dec := json.NewDecoder(bytes.NewReader(arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Question{}, fmt.Errorf("orchestrator: %s arguments: %w", RequestHumanInputToolName, err)
	}
	if strings.TrimSpace(in.Question) == "" {
		return Question{}, errors.New("orchestrator: " + RequestHumanInputToolName + ": question is required")
	}
	return Question{ID: id, Text: in.Question, Schema: in.AnswerSchema}, nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The agents whose permission hooks `countersign hook` answers.
const (
	// hostClaudeCode is Claude Code's PreToolUse hook: allow, deny (the
	// reason goes to the model) or ask, in hookSpecificOutput.
	hostClaudeCode = "claude-code"
	// hostCodex is the Codex CLI's PreToolUse hook: the same wire, but it
	// acts on deny only (with a non-empty reason) and on allow only with
	// updatedInput; anything else it counts as a failed hook and lets the
	// call go on, so a call Countersign allows is answered with nothing.
	hostCodex = "codex"
)

// Run labels the hook sets for the policy.
const (
	labelHookHost           = "hook.host"
	labelHookCwd            = "hook.cwd"
	labelHookPermissionMode = "hook.permission_mode"
	labelHookAgentType      = "hook.agent_type"
)

// maxHookInput bounds the event read from stdin; tool inputs (a Write's
// content) can be large, the API's own limit is lower.
const maxHookInput = 16 << 20

// hookInput is a PreToolUse event as Claude Code and Codex send it. Other
// fields (transcript_path, model, turn_id, ...) are ignored.
type hookInput struct {
	SessionID      string          `json:"session_id"`
	Cwd            string          `json:"cwd"`
	HookEventName  string          `json:"hook_event_name"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolUseID      string          `json:"tool_use_id"`
	PermissionMode string          `json:"permission_mode"`
	AgentType      string          `json:"agent_type"`
	// ToolResponse is what the tool answered (PostToolUse only).
	ToolResponse json.RawMessage `json:"tool_response"`
}

// Hook events countersign hook reads: before a tool use (the decision) and
// after it (the outcome of a claimed call).
const (
	eventPreToolUse  = "PreToolUse"
	eventPostToolUse = "PostToolUse"
)

// readHookInput reads and checks one PreToolUse event.
func readHookInput(r io.Reader) (*hookInput, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHookInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading the hook event from stdin: %w", err)
	}
	if len(data) > maxHookInput {
		return nil, fmt.Errorf("the hook event is larger than %d bytes", maxHookInput)
	}
	var in hookInput
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("the hook event on stdin is not JSON: %w", err)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"session_id", in.SessionID}, {"cwd", in.Cwd}, {"tool_name", in.ToolName}, {"tool_use_id", in.ToolUseID}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	switch {
	case in.HookEventName != eventPreToolUse && in.HookEventName != eventPostToolUse:
		return nil, fmt.Errorf("hook_event_name is %q: countersign hook answers PreToolUse and PostToolUse events only", in.HookEventName)
	case len(missing) > 0:
		return nil, fmt.Errorf("the hook event has no %v", missing)
	case !isJSONObject(in.ToolInput):
		return nil, errors.New("the hook event's tool_input is not a JSON object")
	}
	return &in, nil
}

func isJSONObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
}

// hookDecision is what the agent is told about one tool call.
type hookDecision struct {
	allow bool
	// reason is for the model when the call is denied, and for the user
	// when it is allowed.
	reason string
	// updatedInput, when set, replaces tool_input: the arguments a human
	// approved in place of the proposed ones.
	updatedInput json.RawMessage
}

func denyf(format string, args ...any) hookDecision {
	return hookDecision{reason: fmt.Sprintf(format, args...)}
}

// preToolUseOutput is the hook's answer on stdout.
type preToolUseOutput struct {
	HookSpecificOutput preToolUseSpecific `json:"hookSpecificOutput"`
}

type preToolUseSpecific struct {
	HookEventName            string          `json:"hookEventName"`
	PermissionDecision       string          `json:"permissionDecision"`
	PermissionDecisionReason string          `json:"permissionDecisionReason,omitempty"`
	UpdatedInput             json.RawMessage `json:"updatedInput,omitempty"`
}

// encodeHookDecision writes d in host's protocol. For Codex an allowed
// call without edited arguments is an empty answer: Codex refuses "allow"
// without updatedInput, and an answer it refuses lets the call go on as
// a failed hook, where an empty one is a hook that had nothing to say.
func encodeHookDecision(host string, d hookDecision) ([]byte, error) {
	out := preToolUseSpecific{HookEventName: "PreToolUse", PermissionDecision: "deny", PermissionDecisionReason: d.reason}
	if d.allow {
		out.PermissionDecision = "allow"
		out.UpdatedInput = d.updatedInput
		if host == hostCodex {
			if d.updatedInput == nil {
				return nil, nil
			}
			// Codex reads a reason with deny only.
			out.PermissionDecisionReason = ""
		}
	} else if d.reason == "" {
		out.PermissionDecisionReason = "Countersign denied this call."
	}
	b, err := json.Marshal(preToolUseOutput{HookSpecificOutput: out})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Package codingagent tests `countersign hook` with the real coding agent
// CLIs: Claude Code and Codex (pinned in package.json, installed by
// install-claude.sh when missing) run non-interactively with `countersign
// hook` as their PreToolUse hook, against a real `countersign serve` built
// from this tree under deploy/policies/coding-agent.yaml. The model is the
// one stand-in: a scripted Anthropic Messages API, and a scripted OpenAI
// Responses API, on loopback, streaming the tool calls each scenario needs
// and checking every request as the real API would (the key, the model,
// streaming, and the Messages API's version header).
package codingagent

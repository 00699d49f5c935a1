// Package codingagent tests `countersign hook` with the real coding agent
// CLI: Claude Code (pinned in package.json, installed by install-claude.sh
// when missing) runs non-interactively with `countersign hook` as its
// PreToolUse hook, against a real `countersign serve` built from this tree
// under deploy/policies/coding-agent.yaml. The model is the one stand-in: a
// scripted Anthropic Messages API on loopback that streams the tool uses
// each scenario needs and checks every request as the real API would (the
// API key, the version header, the model).
package codingagent

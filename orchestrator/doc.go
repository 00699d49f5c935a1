// Package orchestrator is the agent-side library of Countersign. A Gate
// reviews the tool calls an agent proposes: the policy allows, denies, or
// gates each call; a gated call becomes an approval request on JetStream and
// the run waits (Review) or is called back (ReviewAsync) when a human has
// decided. Waiting is durable: the approval's id derives from the run and
// tool call ids, so calling Review again after any restart re-attaches to the
// same approval instead of asking twice. Ask puts a question to a human
// (request_human_input, whose tool definition RequestHumanInputTool is
// ready to register with a model) and waits the same way.
//
// Guarantees: a gated call is reported allowed only when its record is
// approved for exactly the arguments about to run (RFC 8785 hash), and its
// Permit must be claimed right before execution, which succeeds once per
// approval in the whole fleet.
package orchestrator

// Package history keeps the recent history of reviewed calls that policy
// conditions count and sum over (history.count, history.sum,
// history.approved; see orchestrator/policy/history.go).
//
// Every gate appends one fact per reviewed call to the HITL_HISTORY stream
// (tool, agent, run, tenant, the policy's verdict, the numeric argument
// values the policy's sums name, the time) and follows the stream with an
// ordered consumer, so each gate holds the same bounded window of facts,
// rebuilt from the stream when it starts. Approvals are followed on the
// decided events of HITL_EVENTS.
//
// What the package guarantees:
//
//   - Exact under concurrent reviews. A review whose policy reads the
//     history is serialized per scope: its fact is published on
//     hitl.history.<tenant>.<run>.<agent> with the expected last sequence of
//     the scope's subject filter (the tenant's, the agent's or the run's)
//     that the figures were computed from. When another gate recorded a
//     call of the scope first, the publish is refused, the gate catches up
//     to that call and decides again. So the calls of one scope are decided
//     one after another, each seeing exactly the facts recorded before it,
//     whichever gate reviews them.
//   - Bounded memory: at most MaxPerScope facts per scope and MaxTotal in
//     all. Beyond a cap the oldest facts are dropped, and a figure whose
//     window reaches back to a dropped fact errors (ErrInexact): the
//     condition is then taken both ways and the call gets the strictest of
//     the rules it could fall under. A figure is exact or it is an error.
//   - A fact is recorded once per review id (the event id), and a call's
//     own fact never counts in its figures.
package history

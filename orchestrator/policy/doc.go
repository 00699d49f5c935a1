// Package policy decides, per tool call, whether it is allowed, denied, or
// must wait for a human, and with which gate settings.
//
// A policy is a YAML file of ordered rules. A rule matches on the tool, the
// agent and the tenant (globs: '*' any run of characters, '?' one), on run
// labels (all must be equal), and on an optional condition in CEL over the
// call's arguments and run (`args.amount > 100 && run.tenant == "prod"`).
// The first rule that matches decides: allow, deny (with a reason for the
// model) or require_approval (with risk, approvers, quorum, channels,
// timeout, ...). Calls no rule matches get the policy's default, which is
// require_approval unless the file says otherwise: unknown tools fail
// closed.
//
// What the package guarantees:
//
//   - Parse refuses a file with any problem — YAML syntax, an unknown field,
//     an unknown action, a duplicate rule name, a condition that does not
//     compile or type-check — and lists every problem with its line and
//     column, so a bad policy never replaces a good one.
//   - Every condition is compiled once, when the policy is parsed. A call
//     decodes its arguments at most once, and only the conditions of rules
//     whose globs match run.
//   - A condition that fails while it runs (a missing argument, a wrong
//     type, deep nesting, the cost limit) never allows and is never
//     skipped: it is taken both ways, and the call gets the strictest of
//     the rules it could fall under (strictest.go), so no choice of
//     arguments gets a weaker gate than a well-typed call. Decision.Error
//     says why.
//   - A Policy is immutable and safe for concurrent use; decisions share no
//     memory with it.
//
// Gate settings are resolved per rule in this order: the rule's own value,
// then risk_defaults for the rule's risk, then default_rule, then the
// built-in safe defaults (medium risk, quorum 1, veto, 24h timeout, reject
// on timeout, approve or reject). Approver groups named as "group:NAME" are
// resolved to their members when the policy is parsed.
//
// A gated request can remind and escalate. reminders lists when, after the
// request was created, approvers who have not voted are told again.
// escalation is a ladder of tiers, each adding approvers (told on its own
// channels, else the rule's) once its after has passed; escalation_repeat
// runs the ladder again up to 9 times. Decision carries the ladder expanded,
// without the tiers the timeout cuts off. Reminders, escalation and
// escalation_repeat follow the same order as the other settings; an empty
// list turns off what a lower layer sets.
//
// sensitive lists JSON pointer patterns of argument values ("/ssn",
// "/items/*/iban") that a gated request masks outside Countersign. Unlike
// the other settings it adds up: a rule's and default_rule's patterns
// together, so a rule can mask more, never less.
//
// Lint reports what Parse refuses plus warnings (unreachable rules, unknown
// approver groups, settings without effect); ParseCases and RunCases run a
// table of calls against a policy, for CI of policy repositories.
package policy

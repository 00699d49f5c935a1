package contracts

// ShadowVerdict is what a shadow rule of the policy (a rule with mode:
// shadow) would have decided for a call: the decision the policy would
// give were that rule enforced. The gate records it beside the enforced
// decision (ApprovalRequested.Shadow, and a review's result) so that a
// rule can be watched before it is enforced. It is a report only: nothing
// enforces it, and the arbiter neither checks nor trusts it.
type ShadowVerdict struct {
	// Rule names the shadow rule.
	Rule string `json:"rule"`
	// Action is allow, require_approval or deny.
	Action string `json:"action"`
	// DecidedBy names the rule whose settings the verdict has, where it
	// is not Rule (the shadow rule's condition errored and a stricter
	// rule below it won).
	DecidedBy string `json:"decided_by,omitempty"`
	// The gate a require_approval verdict would set.
	Risk      string   `json:"risk,omitempty"`
	Quorum    int      `json:"quorum,omitempty"`
	Approvers []string `json:"approvers,omitempty"`
	StepUp    string   `json:"step_up,omitempty"`
	// Error is the condition error, where one was taken both ways.
	Error string `json:"error,omitempty"`
}

// MaxShadowVerdicts bounds the shadow verdicts recorded for one call; the
// gate records the first ones, in the policy's order.
const MaxShadowVerdicts = 16

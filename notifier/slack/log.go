package slack

// Log attribute keys. Values are ids and codes, never tokens, secrets,
// response URLs or request bodies.
const (
	attrEvent     = "event_id"
	attrSlackUser = "slack_user"
	attrApprover  = "approver"
	attrAction    = "action"
	attrDecision  = "decision"
	attrReason    = "reason"
	attrError     = "err"
)

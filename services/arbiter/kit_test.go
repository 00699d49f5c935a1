package arbiter_test

import "github.com/countersign/countersign/contracts/approval/approvaltest"

// The request and vote builders of the approval test kit, under the short
// names these tests use.
var (
	t0               = approvaltest.T0
	request          = approvaltest.Request
	quorum           = approvaltest.Quorum
	noVeto           = approvaltest.NoVeto
	anyApprover      = approvaltest.AnyApprover
	onTimeoutApprove = approvaltest.OnTimeoutApprove
	humanInput       = approvaltest.HumanInput
	vote             = approvaltest.Vote
	comment          = approvaltest.Comment
	command          = approvaltest.Command
)

const eventID = approvaltest.EventID

package orchestrator

import (
	"context"
	"encoding/json"

	"github.com/countersign/countersign/contracts"
)

// AnnouncementsForTest counts the waits the waiter answered from decided
// announcements, and the reads of announced records it made.
func (w *Waiter) AnnouncementsForTest() (answered, reads uint64) {
	return w.answered.Load(), w.reads.Load()
}

// PermitForTest is what a permit claims with: the approval, the arguments
// hash and arguments it binds, and the principal it claims as.
func PermitForTest(p *Permit) (eventID, sha string, args json.RawMessage, by string) {
	return p.eventID, p.sha, p.args, p.by
}

// AskAsyncForTest is Ask that returns once the question's wait is
// registered: the answer comes on ch (pending's Status is not
// VerdictPending when there was nothing to wait for).
func (g *Gate) AskAsyncForTest(ctx context.Context, run contracts.Run, q Question) (pending Answer, ch <-chan Answer, cancel func(), err error) {
	a, known, err := g.submitQuestion(ctx, run, q)
	if err != nil || a.Status != VerdictPending {
		return a, nil, func() {}, err
	}
	c, cancel, err := g.watchAnswer(ctx, a, known)
	return a, c, cancel, err
}

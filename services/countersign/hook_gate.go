package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	csclient "github.com/countersign/countersign/contracts/client"
)

// hookGate decides one tool call of a coding agent: review, a bounded
// wait for a human, and a claim before an approved call is allowed.
type hookGate struct {
	cs     *csclient.Client
	flags  *hookFlags
	stderr io.Writer
	run    contracts.Run
	call   csclient.ToolCall
}

// decide reviews the call and turns the result into the agent's answer.
func (g *hookGate) decide(ctx context.Context) hookDecision {
	res, err := g.review(ctx)
	if err != nil {
		return unreachable(err)
	}
	if res.Verdict == csclient.Pending {
		fmt.Fprintf(g.stderr, "countersign hook: %s waits for approval %s (countersign approvals approve %s), up to %s\n",
			g.call.Name, res.EventID, res.EventID, shortDuration(g.flags.wait))
		if res, err = g.await(ctx, res); err != nil {
			return unreachable(err)
		}
	}
	return g.answer(ctx, res)
}

// review asks once, without waiting.
func (g *hookGate) review(ctx context.Context) (csclient.Result, error) {
	rs, err := g.cs.Review(ctx, g.run, []csclient.ToolCall{g.call})
	if err != nil {
		return csclient.Result{}, err
	}
	return rs[0], nil
}

// await waits up to --wait for a human. When the wait lapses the request is
// withdrawn, so that nobody approves a call no one waits for; a decision
// that came first is answered instead. The result stays Pending when the
// request was withdrawn.
func (g *hookGate) await(ctx context.Context, pending csclient.Result) (csclient.Result, error) {
	wctx, cancel := context.WithTimeout(ctx, g.flags.wait)
	rs, err := g.cs.Wait(wctx, g.run, []csclient.ToolCall{g.call})
	cancel()
	switch {
	case err == nil:
		return rs[0], nil
	case !errors.Is(err, context.DeadlineExceeded):
		return csclient.Result{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.flags.cancelFor)
	defer cancel()
	reason := fmt.Sprintf("not approved within %s: the coding agent's hook stopped waiting", shortDuration(g.flags.wait))
	err = g.cs.Cancel(cctx, pending.EventID, reason)
	if errors.Is(err, csclient.ErrClosed) {
		// Decided while the wait ended: answer the decision.
		return g.review(ctx)
	}
	if err != nil {
		fmt.Fprintf(g.stderr, "countersign hook: withdrawing approval %s: %v\n", pending.EventID, err)
	}
	return pending, nil
}

// answer turns a final (or withdrawn) result into the agent's answer.
func (g *hookGate) answer(ctx context.Context, res csclient.Result) hookDecision {
	switch res.Verdict {
	case csclient.Allowed:
		if res.EventID == "" {
			return hookDecision{allow: true, reason: allowedBy(res)}
		}
		return g.claim(ctx, res)
	case csclient.Pending:
		return denyf("Countersign: not approved within %s; ask again. The call did not run, and its approval request %s was withdrawn. Calling the tool again opens a new request.",
			shortDuration(g.flags.wait), res.EventID)
	case csclient.AlreadyExecuted:
		return alreadyRan(res.EventID)
	}
	reason := res.Reason
	if reason == "" {
		reason = fmt.Sprintf("the call was %s", res.Verdict)
	}
	return denyf("Countersign: %s", reason)
}

// claim uses the approval up right before the call is allowed, with a claim
// id of this answer alone: the same call answered again (a resumed session
// that replays the tool use) finds it claimed and is denied.
func (g *hookGate) claim(ctx context.Context, res csclient.Result) hookDecision {
	_, err := g.cs.Claim(ctx, res.EventID, csclient.NewClaimID())
	switch {
	case errors.Is(err, csclient.ErrAlreadyClaimed):
		return alreadyRan(res.EventID)
	case err != nil:
		return denyf("Countersign: approval %s could not be claimed (%v). The call did not run.", res.EventID, err)
	}
	d := hookDecision{allow: true, reason: fmt.Sprintf("Countersign: approved (%s)", res.EventID)}
	if edited(g.call.Arguments, res.Arguments) {
		d.updatedInput = res.Arguments
		d.reason += ", with the arguments a human edited"
	}
	return d
}

func allowedBy(res csclient.Result) string {
	switch {
	case res.GrantID != "":
		return "Countersign: allowed by grant " + res.GrantID
	case res.Rule != "":
		return "Countersign: allowed by rule " + res.Rule
	}
	return "Countersign: allowed"
}

func alreadyRan(eventID string) hookDecision {
	return denyf("Countersign: this tool call already ran: its approval %s was claimed by an earlier answer to the same tool_use_id, and an approved call runs once. To run it again, make a new tool call.", eventID)
}

// unreachable is the answer when Countersign could not decide.
func unreachable(err error) hookDecision {
	return denyf("Countersign could not review this call (%v). The call did not run (fail closed).", err)
}

// edited reports whether the approved arguments differ from the proposed
// ones, compared in canonical form.
func edited(proposed, approved []byte) bool {
	if len(approved) == 0 {
		return false
	}
	a, errA := contracts.Canonicalize(proposed)
	b, errB := contracts.Canonicalize(approved)
	if errA != nil || errB != nil {
		return !bytes.Equal(proposed, approved)
	}
	return !bytes.Equal(a, b)
}

// shortDuration writes d as people do: 10m, 1h30m, 45s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	csclient "github.com/countersign/countersign/contracts/client"
)

// hookReportWait bounds the report of an outcome after a tool use.
const hookReportWait = 30 * time.Second

// report tells Countersign how a claimed tool use ended (a PostToolUse
// event: the tool ran and answered): the approval of the session's tool
// use is found by its run (the session) and tool call id, and its outcome
// reported once, as succeeded with the SHA-256 of the tool's response. A
// call the policy allowed outright has no approval and nothing to report;
// a report that cannot be made is said on stderr, never blocking the agent.
func (f *hookFlags) report(ctx context.Context, in *hookInput, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, hookReportWait)
	defer cancel()
	c, err := f.conn()
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: the outcome was not reported: %v\n", err)
		return
	}
	cs, err := csclient.New(csclient.Config{URL: c.url, Token: c.token, RetryFor: f.retryFor})
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: the outcome was not reported: %v\n", err)
		return
	}
	recs, err := cs.RunApprovals(ctx, in.SessionID)
	if err != nil {
		fmt.Fprintf(stderr, "countersign hook: the outcome was not reported: %v\n", err)
		return
	}
	for _, rec := range recs {
		if rec.Request.ToolCall == nil || rec.Request.ToolCall.ID != in.ToolUseID || rec.Claim == nil || rec.Execution != nil {
			continue
		}
		o := csclient.Outcome{Status: csclient.Succeeded}
		if len(in.ToolResponse) > 0 {
			sum := sha256.Sum256(in.ToolResponse)
			o.ResultSHA256 = hex.EncodeToString(sum[:])
		}
		if err := cs.Report(ctx, rec.Request.EventID, "outcome-"+rec.Request.EventID, o); err != nil {
			fmt.Fprintf(stderr, "countersign hook: the outcome of %s was not reported: %v\n", rec.Request.EventID, err)
		}
		return
	}
}

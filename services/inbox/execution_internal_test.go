package inbox

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// TestExecutionSaysWhatBecameOfAClaimedCall: the approval page tells a
// claimed call's reported outcome, and a claim with no report as such
// (the runner may have died after its claim).
func TestExecutionSaysWhatBecameOfAClaimedCall(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	rec := &contracts.Record{Status: contracts.StatusApproved}
	if text, state := executionOf(rec); text != "" || state != "" {
		t.Fatalf("before a claim: %q %q", text, state)
	}
	rec.Claim = &contracts.Claim{ClaimID: "c1", At: at, By: "agent:billing"}
	if text, state := executionOf(rec); state != "unreported" || !strings.Contains(text, "no outcome reported") || !strings.Contains(text, "agent:billing") {
		t.Fatalf("claimed, never reported: %q %q", text, state)
	}
	rec.Execution = &contracts.Execution{Status: contracts.ExecutionFailed, Summary: "the bank said no", ReportedBy: "agent:billing", ReportedAt: at.Add(time.Minute), CommandID: "r1"}
	if text, state := executionOf(rec); state != contracts.ExecutionFailed || !strings.Contains(text, "failed") || !strings.Contains(text, "the bank said no") {
		t.Fatalf("reported: %q %q", text, state)
	}
	if got := changeText(contracts.Changed{Change: contracts.ChangeClaimed, By: "agent:billing"}, nil); strings.Contains(got, "ran") {
		t.Fatalf("a claim is told as a run: %q", got)
	}
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/countersigntest"
)

// switchPolicy is a policy source a test changes.
type switchPolicy struct{ p atomic.Pointer[policy.Policy] }

func (s *switchPolicy) Current() *policy.Policy { return s.p.Load() }

const noHistoryPolicy = `
version: "history-none"
default: require_approval
rules:
  - name: pay
    tools: [pay]
    action: require_approval
    approvers: [ann, bob]
`

// TestGateKeepsOnlyTheHistoryItsPolicyReads: under a policy that reads no
// history the gate keeps none in memory but records every call; when a
// policy that reads an hour is put in force, the gate opens a window of an
// hour, and the calls recorded before count in its figures; a policy that
// reads two hours opens a window of two.
func TestGateKeepsOnlyTheHistoryItsPolicyReads(t *testing.T) {
	e := setup(t)
	plain := countersigntest.Policy(t, noHistoryPolicy)
	hour := countersigntest.Policy(t, historyGatePolicy)
	twoHours := countersigntest.Policy(t, strings.ReplaceAll(strings.ReplaceAll(historyGatePolicy, `"1h"`, `"2h"`), "history-t1", "history-t2"))
	countersigntest.Trust(t, plain, hour, twoHours)
	src := &switchPolicy{}
	src.p.Store(plain)
	gate := countersigntest.Gate(t, e.srv.JetStreamAs(embedded.RoleOrchestrator), src)
	submit := func(i int) (orchestrator.Verdict, *contracts.Record) {
		t.Helper()
		vs, err := gate.Submit(context.Background(), run, []orchestrator.ToolCall{
			{ID: fmt.Sprint("w", i), Name: "pay", Arguments: json.RawMessage(`{"amount":5}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return vs[0], e.waitRecord(t, vs[0].EventID, pending)
	}
	for i := range 2 {
		submit(i)
	}
	if h := gate.HistoryHorizonForTest(); h != 0 {
		t.Fatalf("under a policy that reads no history the gate keeps %s of it, want none", h)
	}
	// Both calls are recorded (published without waiting for the ack).
	stream, err := e.js.Stream(context.Background(), contracts.StreamHistory)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HITL_HISTORY holds %d facts, want the 2 calls reviewed", info.State.Msgs)
		}
	}
	for _, c := range []struct {
		p       *policy.Policy
		horizon time.Duration
	}{{hour, time.Hour}, {twoHours, 2 * time.Hour}} {
		src.p.Store(c.p)
		i := int(c.horizon / time.Hour)
		v, rec := submit(i + 1)
		h := rec.Request.History
		if v.Rule != "busy" || len(h) != 1 || h[0].Value != float64(i+1) {
			t.Fatalf("%s: rule %s, figures %+v; want busy with a count of the %d calls before, recorded with no window open", c.p.Version(), v.Rule, h, i+1)
		}
		if got := gate.HistoryHorizonForTest(); got != c.horizon {
			t.Fatalf("%s: the gate keeps %s of the history, want %s", c.p.Version(), got, c.horizon)
		}
	}
}

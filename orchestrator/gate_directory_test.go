package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/countersigntest"
)

const groupPolicy = `
version: "g1"
default: require_approval
groups:
  local: [zoe]
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    quorum: 2
    approvers: ["group:local", "group:finance", "group:legal", erin]
  - name: deploys
    tools: ["deploy"]
    action: require_approval
    approvers: ["group:legal"]
`

// swappable is a directory source a test can switch.
type swappable struct {
	p atomic.Pointer[directory.Directory]
}

func (s *swappable) Current() *directory.Directory { return s.p.Load() }

func parseDirectory(t *testing.T, src string) *directory.Directory {
	t.Helper()
	d, err := directory.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// financeDirectory puts alice, bob and zoe in the finance group.
const financeDirectory = "users:\n  - {id: alice, groups: [finance]}\n  - {id: bob, groups: [finance]}\n  - {id: zoe, groups: [finance]}\n"

// directoryGate is a gate with the policy and a directory that a test can swap.
func (e *env) directoryGate(t *testing.T, policyYAML, directoryYAML string) (*orchestrator.Gate, *swappable) {
	t.Helper()
	p, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	dir := &swappable{}
	dir.p.Store(parseDirectory(t, directoryYAML))
	countersigntest.Trust(t, p)
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: e.js, Policy: orchestrator.StaticPolicy{P: p}, Directory: dir, Now: e.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	return gate, dir
}

func TestGateFreezesDirectoryGroups(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	gate, dir := e.directoryGate(t, groupPolicy, financeDirectory)

	run := contracts.Run{ID: "run-dir", Agent: "billing-bot"}
	vs, err := gate.Submit(ctx, run, []orchestrator.ToolCall{
		{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)},
		{ID: "deploy", Name: "deploy"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pay := e.waitRecord(t, vs[0].EventID, pending)
	// Policy groups first (zoe), then directory members (alice, bob; zoe
	// once), the unknown group kept to fail closed, then plain ids.
	if want := []string{"zoe", "alice", "bob", "group:legal", "erin"}; !slices.Equal(pay.Request.Quorum.Approvers, want) {
		t.Fatalf("approvers %v, want %v", pay.Request.Quorum.Approvers, want)
	}
	// A request whose only group nobody knows cannot be approved by anyone.
	dep := e.waitRecord(t, vs[1].EventID, pending)
	if want := []string{"group:legal"}; !slices.Equal(dep.Request.Quorum.Approvers, want) {
		t.Fatalf("approvers %v, want %v", dep.Request.Quorum.Approvers, want)
	}
	e.vote(t, dep.Request.EventID, "alice", contracts.DecisionApprove, "")
	if rec := e.waitRecord(t, dep.Request.EventID, func(r *contracts.Record) bool { return len(r.RefusedVotes) == 1 }); rec.RefusedVotes[0].Reason != contracts.ReasonNotAnApprover || rec.Status != contracts.StatusPending {
		t.Fatalf("vote on an unresolved group: %+v", rec.RefusedVotes)
	}

	// The directory changes: bob leaves finance, carol joins. The pending
	// request keeps its frozen list; carol cannot vote on it, bob still can.
	dir.p.Store(parseDirectory(t, "users:\n  - {id: alice, groups: [finance]}\n  - {id: bob}\n  - {id: carol, groups: [finance]}\n"))
	e.vote(t, pay.Request.EventID, "carol", contracts.DecisionApprove, "")
	e.waitRecord(t, pay.Request.EventID, func(r *contracts.Record) bool {
		return len(r.RefusedVotes) == 1 && r.RefusedVotes[0].Reason == contracts.ReasonNotAnApprover
	})
	e.vote(t, pay.Request.EventID, "bob", contracts.DecisionApprove, "")
	e.vote(t, pay.Request.EventID, "alice", contracts.DecisionApprove, "")
	if rec := e.waitRecord(t, pay.Request.EventID, func(r *contracts.Record) bool { return r.Terminal() }); rec.Status != contracts.StatusApproved {
		t.Fatalf("status %s after two finance approvals", rec.Status)
	}
	// A new request sees the new directory.
	vs, err = gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "pay-2", Name: "payments.send", Arguments: json.RawMessage(`{"amount":6}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.waitRecord(t, vs[0].EventID, pending); !slices.Equal(rec.Request.Quorum.Approvers, []string{"zoe", "alice", "carol", "group:legal", "erin"}) {
		t.Fatalf("approvers after the change: %v", rec.Request.Quorum.Approvers)
	}
}

func TestGateWithoutDirectoryKeepsGroups(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, err := policy.Parse([]byte(groupPolicy))
	if err != nil {
		t.Fatal(err)
	}
	countersigntest.Trust(t, p)
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: e.js, Policy: orchestrator.StaticPolicy{P: p}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	vs, err := gate.Submit(ctx, contracts.Run{ID: "run-nodir", Agent: "a"}, []orchestrator.ToolCall{{ID: "pay", Name: "payments.send"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord(t, vs[0].EventID, pending)
	if want := []string{"zoe", "group:finance", "group:legal", "erin"}; !slices.Equal(rec.Request.Quorum.Approvers, want) {
		t.Fatalf("approvers %v, want %v", rec.Request.Quorum.Approvers, want)
	}
}

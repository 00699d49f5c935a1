package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

const timersGatePolicy = `
version: "timers-1"
default: require_approval
groups:
  local: [zoe]
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [erin]
    channels: [inbox]
    timeout: 8h
    reminders: [10m, 1h]
    escalation:
      - after: 2h
        approvers: ["group:local", "group:finance"]
        channels: [email]
      - after: 3h
        approvers: [cfo, "group:legal"]
    escalation_repeat: 1
  - name: questions
    tools: [request_human_input]
    action: require_approval
    reminders: [5m]
    escalation:
      - after: 30m
        approvers: ["group:finance"]
  - name: plain
    tools: [plain]
    action: require_approval
`

// publishedRequest reads the request the gate published on subject, as
// it is on the wire.
func publishedRequest(t *testing.T, e *env, subject string) (contracts.ApprovalRequested, map[string]json.RawMessage) {
	t.Helper()
	ctx := context.Background()
	stream, err := e.js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("no request on %s: %v", subject, err)
	}
	var req contracts.ApprovalRequested
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(msg.Data, &raw); err != nil {
		t.Fatal(err)
	}
	return req, raw
}

func equalEscalation(a, b []contracts.EscalationTier) bool {
	return slices.EqualFunc(a, b, func(x, y contracts.EscalationTier) bool {
		return x.After == y.After && slices.Equal(x.Approvers, y.Approvers) && slices.Equal(x.Channels, y.Channels)
	})
}

// TestGateSnapshotsRemindersAndEscalation checks that a request carries the
// rule's reminders and its escalation ladder, repeats expanded, with every
// tier's groups frozen to their members when the request is created, and
// that a request whose rule sets neither carries empty lists, not null.
func TestGateSnapshotsRemindersAndEscalation(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	gate, _ := e.directoryGate(t, timersGatePolicy, financeDirectory)

	run := contracts.Run{ID: "run-timers", Agent: "billing-bot"}
	vs, err := gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := publishedRequest(t, e, contracts.ToolRequestedSubject(run.Agent))
	if req.EventID != vs[0].EventID {
		t.Fatalf("published request %s, want %s", req.EventID, vs[0].EventID)
	}
	if want := []string{"10m0s", "1h0m0s"}; !slices.Equal(req.Reminders, want) {
		t.Errorf("reminders %v, want %v", req.Reminders, want)
	}
	// The policy's group first (zoe), then the directory's members (zoe
	// once); a group nobody knows stays as written; a tier without channels
	// gets the rule's.
	managers := []string{"zoe", "alice", "bob"}
	want := []contracts.EscalationTier{
		{After: "2h0m0s", Approvers: managers, Channels: []string{"email"}},
		{After: "3h0m0s", Approvers: []string{"cfo", "group:legal"}, Channels: []string{"inbox"}},
		{After: "5h0m0s", Approvers: managers, Channels: []string{"email"}},
		{After: "6h0m0s", Approvers: []string{"cfo", "group:legal"}, Channels: []string{"inbox"}},
	}
	if !equalEscalation(req.Escalation, want) {
		t.Errorf("escalation %+v,\nwant %+v", req.Escalation, want)
	}
	// The record the arbiter keeps holds the same snapshot.
	rec := e.waitRecord(t, vs[0].EventID, pending)
	if !equalEscalation(rec.Request.Escalation, want) || !slices.Equal(rec.Request.Reminders, req.Reminders) {
		t.Errorf("record snapshot: escalation %+v reminders %v", rec.Request.Escalation, rec.Request.Reminders)
	}

	// A question takes the timers of its rule too, frozen the same way.
	if _, err := gate.SubmitQuestion(ctx, run, orchestrator.Question{ID: "q1", Text: "Which account?"}); err != nil {
		t.Fatal(err)
	}
	q, _ := publishedRequest(t, e, contracts.InputRequestedSubject(run.Agent))
	if !slices.Equal(q.Reminders, []string{"5m0s"}) ||
		!equalEscalation(q.Escalation, []contracts.EscalationTier{{After: "30m0s", Approvers: []string{"alice", "bob", "zoe"}}}) {
		t.Errorf("question: reminders %v escalation %+v", q.Reminders, q.Escalation)
	}

	// Without timers: empty lists on the wire.
	if _, err := gate.Submit(ctx, run, []orchestrator.ToolCall{{ID: "plain", Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	_, raw := publishedRequest(t, e, contracts.ToolRequestedSubject(run.Agent))
	if string(raw["reminders"]) != "[]" || string(raw["escalation"]) != "[]" {
		t.Errorf("without timers: reminders %s escalation %s, want [] and []", raw["reminders"], raw["escalation"])
	}
}

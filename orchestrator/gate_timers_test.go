package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
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

// setupClock is an env whose arbiter and gates run on a fake clock that
// plays the server's scheduler, so a request's hours pass in no wall time.
// It has no gate of its own: make one with directoryGate.
func setupClock(t *testing.T) (*env, *countersigntest.Clock) {
	t.Helper()
	srv := eventstest.NewServer(t)
	js := srv.JetStream()
	srv.Provision(js)
	clock := countersigntest.NewClock(time.Now())
	clock.Attach(js)
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Now: clock.Now})
	kv, err := js.KeyValue(context.Background(), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, kv: kv, now: clock.Now}, clock
}

// TestGateReviewWaitsThroughTheEscalationLadder follows a review up its
// rule's ladder: before the first tier a manager may not approve; two hours
// later the tier has added the managers, frozen from the directory, and a
// manager's approval resumes the run.
func TestGateReviewWaitsThroughTheEscalationLadder(t *testing.T) {
	e, clock := setupClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	gate, _ := e.directoryGate(t, timersGatePolicy, financeDirectory)

	run := contracts.Run{ID: "run-ladder", Agent: "billing-bot"}
	call := orchestrator.ToolCall{ID: "pay", Name: "payments.send", Arguments: json.RawMessage(`{"amount":5}`)}
	verdicts := make(chan []orchestrator.Verdict, 1)
	if err := gate.ReviewAsync(ctx, run, []orchestrator.ToolCall{call}, func(v []orchestrator.Verdict, err error) {
		if err != nil {
			t.Error(err)
		}
		verdicts <- v
	}); err != nil {
		t.Fatal(err)
	}
	id := orchestrator.EventID(run, call.ID)
	rec := e.waitRecord(t, id, pending)
	for _, tm := range []struct {
		kind  string
		after time.Duration
	}{{"remind-1", 10 * time.Minute}, {"remind-2", time.Hour}, {"escalate-1", 2 * time.Hour}} {
		if err := clock.WaitScheduled(ctx, id, tm.kind, rec.Request.CreatedAt.Add(tm.after)); err != nil {
			t.Fatal(err)
		}
	}

	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	rec = e.waitRecord(t, id, func(r *contracts.Record) bool { return len(r.RefusedVotes) == 1 })
	if rec.RefusedVotes[0].Reason != contracts.ReasonNotAnApprover || rec.EscalationLevel != 0 {
		t.Fatalf("a manager's vote before the tier: %+v at level %d, want refused as %s", rec.RefusedVotes, rec.EscalationLevel, contracts.ReasonNotAnApprover)
	}

	if err := clock.Advance(ctx, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	e.waitRecord(t, id, func(r *contracts.Record) bool { return r.EscalationLevel == 1 })
	e.vote(t, id, "alice", contracts.DecisionApprove, "")
	select {
	case v := <-verdicts:
		if v[0].Verdict != orchestrator.VerdictAllowed {
			t.Fatalf("verdict %+v, want allowed by the tier's manager", v[0])
		}
	case <-ctx.Done():
		t.Fatal("the review was not resumed by the manager's approval")
	}
	final := e.waitRecord(t, id, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending })
	if final.Outcome == nil || !slices.Equal(final.Outcome.DecidedBy, []string{"alice"}) {
		t.Fatalf("outcome %+v, want decided by alice", final.Outcome)
	}
}

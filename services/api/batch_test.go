package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/services/api"
)

func (e *env) batch(t *testing.T, token string, body any) api.BatchAnswer {
	t.Helper()
	r := e.call(t, "POST", "/v1/votes", token, body)
	if r.status != http.StatusOK {
		t.Fatalf("POST /v1/votes: status %d: %s", r.status, r.body)
	}
	var ans api.BatchAnswer
	r.decode(t, &ans)
	return ans
}

// requestCounter counts the requests seen on one subject prefix, by
// what follows the prefix.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]uint64
}

// countRequests counts the requests sent on prefix from now on.
func countRequests(t testing.TB, srv *eventstest.Server, prefix string) *requestCounter {
	t.Helper()
	c := &requestCounter{n: map[string]uint64{}}
	nc := srv.Connect()
	if _, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		c.mu.Lock()
		c.n[strings.TrimPrefix(m.Subject, prefix)]++
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *requestCounter) of(id string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// votesSent counts the votes sent for approval id: stored on the
// resolved subject, or asked of the arbiter by request.
func (e *env) votesSent(t *testing.T, id string) uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), contracts.StreamResolutions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(contracts.ResolvedSubject(id)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[contracts.ResolvedSubject(id)] + e.voteRequests.of(id)
}

// TestBatchRunOfFifty decides the 50 pending calls of a run in one request:
// the one alice requested herself is refused (self_approval) and reported,
// the other 49 count; a retry answers the same and publishes nothing more.
func TestBatchRunOfFifty(t *testing.T) {
	e := setup(t)
	run := contracts.Run{ID: "run-50", Agent: "billing-bot"}
	var calls []toolCall
	for i := range 49 {
		calls = append(calls, toolCall{ID: fmt.Sprintf("c%d", i), Name: "payments.send", Arguments: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, i+1))})
	}
	ids := map[string]bool{}
	for _, r := range e.review(t, "", run, calls...) {
		ids[r.EventID] = true
	}
	mine := run
	mine.RequestedBy = "alice"
	self := e.review(t, "", mine, toolCall{ID: "c49", Name: "payments.send", Arguments: json.RawMessage(`{"amount":50}`)})[0].EventID
	ids[self] = true
	// Another run's approval is left alone.
	other := e.pendingApproval(t, "run-other", "payments.send")

	body := map[string]any{"run_id": "run-50", "vote": map[string]any{"vote_id": "batch-1", "decision": "approve", "comment": "all fifty"}}
	for attempt := range 2 {
		ans := e.batch(t, "alice", body)
		if len(ans.Results) != 50 || ans.Counted != 49 || ans.Refused != 1 || ans.InFlight != 0 || ans.Truncated {
			t.Fatalf("attempt %d: %d results, counted %d, refused %d, in flight %d", attempt, len(ans.Results), ans.Counted, ans.Refused, ans.InFlight)
		}
		for _, r := range ans.Results {
			if !ids[r.EventID] {
				t.Fatalf("a result for %s, not of the run", r.EventID)
			}
			if r.VoteID != api.BatchVoteID("batch-1", r.EventID) {
				t.Errorf("vote id %s of %s is not derived from the batch's", r.VoteID, r.EventID)
			}
			switch {
			case r.EventID == self:
				if r.Result != "refused" || r.Status != http.StatusForbidden || r.Error == nil || r.Error.Code != contracts.ReasonSelfApproval {
					t.Errorf("the self-approval: %+v", r)
				}
			case r.Result != "counted" || r.Status != http.StatusOK || r.ApprovalStatus != contracts.StatusApproved:
				t.Errorf("approval %s: %+v", r.EventID, r)
			}
		}
	}
	for id := range ids {
		if n := e.votesSent(t, id); n != 1 {
			t.Errorf("%d votes sent for %s, want 1", n, id)
		}
	}
	var rec recordAnswer
	e.call(t, "GET", "/v1/approvals/"+self, "alice", nil).decode(t, &rec)
	if rec.Record.Status != contracts.StatusPending || len(rec.Record.RefusedVotes) != 1 || rec.Record.RefusedVotes[0].Reason != contracts.ReasonSelfApproval {
		t.Fatalf("the self-requested approval: %s %+v", rec.Record.Status, rec.Record.RefusedVotes)
	}
	e.call(t, "GET", "/v1/approvals/"+other, "alice", nil).decode(t, &rec)
	if rec.Record.Status != contracts.StatusPending || len(rec.Record.Votes)+len(rec.Record.RefusedVotes) != 0 {
		t.Fatalf("another run's approval was voted on: %+v", rec.Record)
	}
}

// TestBatchSelection casts a selection: each vote is answered as it would
// be alone, and one that breaks a rule does not stop the others.
func TestBatchSelection(t *testing.T) {
	e := setup(t)
	a := e.pendingApproval(t, "run-a", "payments.send")
	b := e.pendingApproval(t, "run-b", "payments.send")
	c := e.pendingApproval(t, "run-c", "payments.send")
	ans := e.batch(t, "alice", map[string]any{"votes": []map[string]any{
		{"event_id": a, "vote_id": "sel-a", "decision": "approve"},
		{"event_id": b, "decision": "reject", "comment": "no", "approver": map[string]string{"id": "bob"}},
		{"event_id": "no-such-approval", "decision": "approve"},
		{"event_id": c, "decision": "reject", "comment": "not this one"},
	}})
	want := []struct {
		result string
		status int
		code   string
		field  string
	}{
		{"counted", 200, "", ""},
		{"refused", 400, api.CodeApproverNotAllowed, "votes[1].approver"},
		{"refused", 404, api.CodeUnknownEvent, ""},
		{"counted", 200, "", ""},
	}
	if len(ans.Results) != len(want) || ans.Counted != 2 || ans.Refused != 2 {
		t.Fatalf("answer %+v", ans)
	}
	for i, w := range want {
		r := ans.Results[i]
		code, field := "", ""
		if r.Error != nil {
			code, field = r.Error.Code, r.Error.Field
		}
		if r.Result != w.result || r.Status != w.status || code != w.code || field != w.field {
			t.Errorf("result %d: %+v (error %s %s), want %+v", i, r, code, field, w)
		}
	}
	if ans.Results[0].VoteID != "sel-a" || ans.Results[0].ApprovalStatus != contracts.StatusApproved || ans.Results[3].ApprovalStatus != contracts.StatusRejected {
		t.Errorf("results %+v", ans.Results)
	}
	if n := e.votesSent(t, b); n != 0 {
		t.Errorf("%d votes sent for the refused body", n)
	}

	for name, tc := range map[string]struct {
		body        any
		code, field string
	}{
		"empty":        {map[string]any{"votes": []any{}}, api.CodeInvalidField, "votes"},
		"nothing":      {map[string]any{}, api.CodeInvalidField, "votes"},
		"both forms":   {map[string]any{"votes": []map[string]any{{"event_id": a, "decision": "approve"}}, "run_id": "r"}, api.CodeInvalidField, "votes"},
		"run, no vote": {map[string]any{"run_id": "r"}, api.CodeInvalidField, "vote"},
		"twice":        {map[string]any{"votes": []map[string]any{{"event_id": a, "decision": "approve"}, {"event_id": a, "decision": "reject"}}}, api.CodeInvalidField, "votes[1].event_id"},
		"bad id":       {map[string]any{"votes": []map[string]any{{"event_id": "a b", "decision": "approve"}}}, api.CodeInvalidEventID, "votes[0].event_id"},
		"unknown":      {map[string]any{"votes": []map[string]any{{"event_id": a, "decision": "approve", "colour": "red"}}}, api.CodeUnknownField, "votes[0].colour"},
		"bad decision": {map[string]any{"run_id": "r", "vote": map[string]any{"decision": "maybe"}}, api.CodeInvalidField, "vote.decision"},
	} {
		t.Run(name, func(t *testing.T) {
			e.call(t, "POST", "/v1/votes", "alice", tc.body).wantError(t, http.StatusBadRequest, tc.code, tc.field)
		})
	}
	var many []map[string]any
	for i := range api.MaxBatchVotes + 1 {
		many = append(many, map[string]any{"event_id": fmt.Sprintf("e%d", i), "decision": "approve"})
	}
	e.call(t, "POST", "/v1/votes", "alice", map[string]any{"votes": many}).wantError(t, http.StatusBadRequest, api.CodeInvalidField, "votes")
	e.call(t, "POST", "/v1/votes", "agent", map[string]any{"run_id": "run-a", "vote": map[string]any{"decision": "approve"}}).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
}

package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// An object that names a key twice is ambiguous (readers disagree on which
// value counts), so every body that has one is refused with the key's path,
// before anything is published.
func TestDuplicateKeysAreRefused(t *testing.T) {
	e := setup(t)
	pay := e.pendingApproval(t, "run-dup", "payments.send")
	before, err := e.kv.Get(context.Background(), pay)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, path, body string
		code, field      string
	}{
		{"review with two runs", "/v1/reviews",
			`{"run":{"agent":"a"},"tool_calls":[{"name":"payments.send"}],"run":{"agent":"b"}}`, "invalid_json", "run"},
		{"review with a repeated run field", "/v1/reviews",
			`{"run":{"agent":"a","id":"r1","agent":"b"},"tool_calls":[{"name":"payments.send"}]}`, "invalid_json", "run.agent"},
		{"review with repeated argument keys, one escaped", "/v1/reviews",
			`{"run":{"agent":"a"},"tool_calls":[{"name":"payments.send","arguments":{"amount":1,"to":"x","\u0061mount":900}}]}`,
			"invalid_arguments", "tool_calls[0].arguments.amount"},
		{"review with a repeated key deep in the arguments", "/v1/reviews",
			`{"run":{"agent":"a"},"tool_calls":[{"name":"x"},{"name":"y","arguments":{"p":[{"q":{"r":1,"r":2}}]}}]}`,
			"invalid_arguments", "tool_calls[1].arguments.p[0].q.r"},
		{"vote with two decisions", "/v1/approvals/" + pay + "/votes",
			`{"decision":"reject","comment":"wrong account","decision":"approve"}`, "invalid_json", "decision"},
		{"edit with repeated argument keys", "/v1/approvals/" + pay + "/votes",
			`{"decision":"edit","arguments":{"amount":1,"amount":2}}`, "invalid_arguments", "arguments.amount"},
		{"answer with repeated content keys", "/v1/approvals/" + pay + "/votes",
			`{"decision":"answer","answer":{"action":"accept","content":{"city":"Oslo","city":"Rome"}}}`, "invalid_arguments", "answer.content.city"},
		{"extend with two deadlines", "/v1/approvals/" + pay + "/extend",
			`{"until":"2h","until":"1s"}`, "invalid_json", "until"},
		{"question with a repeated schema key", "/v1/questions",
			`{"run":{"agent":"a"},"question":{"text":"?","schema":{"type":"object","type":"string"}}}`, "invalid_schema", "question.schema.type"},
		// I-JSON: an integer a double would round is refused, naming it.
		{"review with an integer beyond 2^53", "/v1/reviews",
			`{"run":{"agent":"a"},"tool_calls":[{"name":"payments.send","arguments":{"amount":1,"to_account":12345678901234567}}]}`,
			"invalid_arguments", "tool_calls[0].arguments.to_account"},
		{"review with 2^53 deep in the arguments", "/v1/reviews",
			`{"run":{"agent":"a"},"tool_calls":[{"name":"x","arguments":{"p":[1,{"q":-9007199254740992}]}}]}`,
			"invalid_arguments", "tool_calls[0].arguments.p[1].q"},
		{"edit with an integer beyond 2^53", "/v1/approvals/" + pay + "/votes",
			`{"decision":"edit","arguments":{"amount":99999999999999999999}}`, "invalid_arguments", "arguments.amount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			token := "agent"
			if c.path != "/v1/reviews" && c.path != "/v1/questions" {
				token = "alice" // the approval's approver
			}
			e.call(t, "POST", c.path, token, c.body).wantError(t, http.StatusBadRequest, c.code, c.field)
		})
	}

	// Nothing was published: no request besides the setup's, no vote or
	// command, and the record is as it was.
	ctx := context.Background()
	rs, err := e.js.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	if n := rs.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("%d requests on the bus, want the setup's one", n)
	}
	res, err := e.js.Stream(ctx, contracts.StreamResolutions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := res.Info(ctx, jetstream.WithSubjectFilter("hitl.approval.>"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d votes or commands published for refused bodies", info.State.Msgs)
	}
	after, err := e.kv.Get(ctx, pay)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision() != before.Revision() || string(after.Value()) != string(before.Value()) {
		t.Errorf("the record changed: revision %d → %d", before.Revision(), after.Revision())
	}

	// The same approver's well-formed vote still counts.
	if ans := e.approve(t, "alice", pay); ans.Record.Status != contracts.StatusApproved || len(ans.Record.Votes) != 1 {
		t.Fatalf("after the refusals: status %s, votes %+v", ans.Record.Status, ans.Record.Votes)
	}
}

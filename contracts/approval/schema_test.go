package approval_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// refundSchema is the JSON Schema of the refund tool's arguments.
const refundSchema = `{
  "type": "object",
  "required": ["amount", "currency"],
  "properties": {
    "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
    "currency": {"enum": ["eur", "usd"]},
    "meta": {"type": "object", "properties": {"ticket": {"type": "string", "pattern": "^T-[0-9]+$"}}},
    "reason": {"type": "string"}
  },
  "additionalProperties": false
}`

func withToolSchema(r *contracts.ApprovalRequested) { r.ToolSchema = json.RawMessage(refundSchema) }

// cityQuestion asks for a city and a number of nights.
func cityQuestion(r *contracts.ApprovalRequested) {
	humanInput(r)
	r.Question = &contracts.Question{Text: "Where to?", Schema: json.RawMessage(`{
	  "type": "object", "required": ["city"],
	  "properties": {"city": {"type": "string", "minLength": 2}, "nights": {"type": "integer", "minimum": 1}}
	}`)}
}

func answer(action, content string) func(*contracts.Vote) {
	return func(v *contracts.Vote) {
		v.Answer = &contracts.Answer{Action: action}
		if content != "" {
			v.Answer.Content = json.RawMessage(content)
		}
	}
}

// wantSchemaRefusal checks a vote refused as invalid_arguments whose
// detail names the failing value's pointer.
func wantSchemaRefusal(field string) func(*testing.T, contracts.Record, approval.Result) {
	return func(t *testing.T, in contracts.Record, res approval.Result) {
		t.Helper()
		if res.Refusal != contracts.ReasonInvalidArguments || !res.Changed || res.Decided {
			t.Fatalf("result = refusal %q changed %v decided %v, want invalid_arguments recorded", res.Refusal, res.Changed, res.Decided)
		}
		rv := res.Record.RefusedVotes[len(res.Record.RefusedVotes)-1]
		if !strings.HasPrefix(rv.Detail, field+": ") || len(rv.Detail) <= len(field)+2 {
			t.Errorf("detail %q, want it to start with %q and say why", rv.Detail, field+": ")
		}
		if res.Record.Status != contracts.StatusPending || len(res.Record.Votes) != len(in.Votes) {
			t.Errorf("a refused vote changed the record: %s, %d votes", res.Record.Status, len(res.Record.Votes))
		}
	}
}

func TestApplyVoteSchemas(t *testing.T) {
	runCases(t, []machineCase{
		{
			name:  "an edit over the maximum is refused at arguments/amount",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":5000,"currency":"eur"}`)), at(5)),
			check: wantSchemaRefusal("arguments/amount"),
		},
		{
			name:  "an edit missing a required argument names it",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":5}`)), at(5)),
			check: wantSchemaRefusal("arguments/currency"),
		},
		{
			name:  "an edit adding an unknown argument names it",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":5,"currency":"eur","iban":"x"}`)), at(5)),
			check: wantSchemaRefusal("arguments/iban"),
		},
		{
			name:  "a nested failure is named by its full pointer",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":5,"currency":"eur","meta":{"ticket":"nope"}}`)), at(5)),
			check: wantSchemaRefusal("arguments/meta/ticket"),
		},
		{
			name:  "an edit that conforms approves with the diff",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":80,"currency":"eur","meta":{"ticket":"T-1"}}`)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionEdit, []string{"alice"}, at(5))
				wantJSON(t, "outcome arguments", out.Arguments, `{"amount":80,"currency":"eur","meta":{"ticket":"T-1"}}`)
				wantJSON(t, "diff", out.Diff, `[{"op":"replace","path":"/amount","value":80},{"op":"remove","path":"/reason"}]`)
			},
		},
		{
			name:  "an approval is not checked: the requested arguments are the agent's",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, withToolSchema)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"alice"}, at(5))
			},
		},
		{
			name: "a request whose schema does not compile refuses every edit (fail closed)",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, func(r *contracts.ApprovalRequested) { r.ToolSchema = json.RawMessage(`{"type":"nope"}`) }))
			},
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":5,"currency":"eur"}`)), at(5)),
			check: wantSchemaRefusal("arguments"),
		},
		{
			name:  "an accepted answer that fails the question's schema is refused",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, cityQuestion)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, answer("accept", `{"city":"X"}`)), at(5)),
			check: wantSchemaRefusal("answer/content/city"),
		},
		{
			name:  "an accept without content fails a schema that wants an object",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, cityQuestion)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, answer("accept", "")), at(5)),
			check: wantSchemaRefusal("answer/content"),
		},
		{
			name:  "an accepted answer that conforms is the outcome",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, cityQuestion)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, answer("accept", `{"city":"Lisbon","nights":3}`)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusAnswered, contracts.DecisionAnswer, []string{"bob"}, at(5))
				wantJSON(t, "answer content", out.Arguments, `{"city":"Lisbon","nights":3}`)
				if out.Action != "accept" {
					t.Errorf("outcome action %q, want accept", out.Action)
				}
			},
		},
		{
			name:  "a decline needs no content and is not checked",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, cityQuestion)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, answer("decline", "")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusAnswered, contracts.DecisionAnswer, []string{"bob"}, at(5))
				if out.Action != "decline" || len(out.Arguments) != 0 {
					t.Errorf("outcome action %q content %s, want decline without content", out.Action, out.Arguments)
				}
			},
		},
		{
			name:  "a cancel is recorded as such",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, cityQuestion)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, answer("cancel", "")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusAnswered, contracts.DecisionAnswer, []string{"bob"}, at(5))
				if out.Action != "cancel" {
					t.Errorf("outcome action %q, want cancel", out.Action)
				}
			},
		},
	})
}

// An edit that passes the schema resets the approvals given for the
// arguments before it: with quorum 2, alice's approval of the requested
// arguments no longer counts once bob edits them.
func TestApplyVoteSchemaEditResetsApprovals(t *testing.T) {
	rec := record(t, request(t, withToolSchema, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
	bad := approval.ApplyVote(rec, vote("v2", "bob", contracts.DecisionEdit, args(`{"amount":-1,"currency":"eur"}`)), at(2))
	if bad.Refusal != contracts.ReasonInvalidArguments {
		t.Fatalf("refusal %q, want invalid_arguments", bad.Refusal)
	}
	res := approval.ApplyVote(bad.Record, vote("v3", "bob", contracts.DecisionEdit, args(`{"amount":80,"currency":"eur"}`)), at(3))
	wantPending(t, res, 2)
	res = approval.ApplyVote(res.Record, vote("v4", "carol", contracts.DecisionApprove, saw(hash(t, `{"amount":80,"currency":"eur"}`))), at(4))
	out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"bob", "carol"}, at(4))
	wantJSON(t, "outcome arguments", out.Arguments, `{"amount":80,"currency":"eur"}`)
}

func TestCompileSchema(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		ok           bool
	}{
		{"object schema", refundSchema, true},
		{"empty schema", `{}`, true},
		{"local $ref", `{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`, true},
		{"draft-07 meta-schema is embedded", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, true},
		{"remote $ref over https", `{"properties":{"a":{"$ref":"https://example.com/s.json"}}}`, false},
		{"remote $ref over http", `{"$ref":"http://127.0.0.1:1/s.json"}`, false},
		{"file $ref", `{"$ref":"file:///etc/passwd"}`, false},
		{"relative $ref", `{"$ref":"other.json"}`, false},
		{"unknown type", `{"type":"nope"}`, false},
		{"boolean schema", `true`, false},
		{"not JSON", `{`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := approval.CompileSchema(json.RawMessage(tc.schema))
			if (err == nil) != tc.ok {
				t.Fatalf("CompileSchema = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, approval.ErrInvalidSchema) {
				t.Errorf("error %v does not wrap ErrInvalidSchema", err)
			}
		})
	}
}

func TestValidateJSON(t *testing.T) {
	schema := json.RawMessage(refundSchema)
	if e := approval.ValidateJSON(schema, json.RawMessage(`{"amount":1,"currency":"usd"}`), "arguments"); e != nil {
		t.Fatalf("a conforming value: %v", e)
	}
	e := approval.ValidateJSON(schema, json.RawMessage(`{"amount":5000,"currency":"usd"}`), "arguments")
	if e == nil || e.Field != "arguments/amount" || e.Message != "must be at most 1000 (got 5000)" {
		t.Fatalf("got %+v, want arguments/amount naming the maximum", e)
	}
	// Pointer tokens are escaped (RFC 6901).
	e = approval.ValidateJSON(json.RawMessage(`{"properties":{"a/b~c":{"type":"string"}}}`), json.RawMessage(`{"a/b~c":1}`), "x")
	if e == nil || e.Field != "x/a~1b~0c" {
		t.Fatalf("got %+v, want x/a~1b~0c", e)
	}
}

func TestValidateRequestChecksSchemas(t *testing.T) {
	req := request(t, func(r *contracts.ApprovalRequested) {
		r.ToolSchema = json.RawMessage(`{"$ref":"https://example.com/x"}`)
	})
	if err := approval.ValidateRequest(&req); err == nil || !strings.Contains(err.Error(), "tool_schema") {
		t.Errorf("a tool_schema with a remote $ref: %v", err)
	}
	req = request(t, humanInput, func(r *contracts.ApprovalRequested) { r.Question.Schema = json.RawMessage(`{"type":1}`) })
	if err := approval.ValidateRequest(&req); err == nil || !strings.Contains(err.Error(), "question.schema") {
		t.Errorf("a question.schema that does not compile: %v", err)
	}
	req = request(t, withToolSchema)
	if err := approval.ValidateRequest(&req); err != nil {
		t.Errorf("a valid request: %v", err)
	}
}

package approval_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/approval/approvaltest"
)

// The request and vote builders of the approval test kit, under the short
// names these tests use.
var (
	t0               = approvaltest.T0
	at               = approvaltest.At
	hash             = approvaltest.Hash
	request          = approvaltest.Request
	quorum           = approvaltest.Quorum
	noVeto           = approvaltest.NoVeto
	anyApprover      = approvaltest.AnyApprover
	allowSelf        = approvaltest.AllowSelf
	onTimeoutApprove = approvaltest.OnTimeoutApprove
	humanInput       = approvaltest.HumanInput
	vote             = approvaltest.Vote
	comment          = approvaltest.Comment
	saw              = approvaltest.Saw
	args             = approvaltest.Args
	record           = approvaltest.Record
	command          = approvaltest.Command
)

const (
	eventID       = approvaltest.EventID
	requestedArgs = approvaltest.RequestedArgs
	editedArgs    = approvaltest.EditedArgs
)

// machineCase applies one vote, command or expiry to a record.
type machineCase struct {
	name  string
	rec   func(t *testing.T) contracts.Record
	apply func(rec contracts.Record) approval.Result
	check func(t *testing.T, in contracts.Record, res approval.Result)
}

func snapshot(t *testing.T, rec contracts.Record) []byte {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// runCases applies each case and checks, beyond its own expectations, that
// the input record is not mutated, neither by applying nor by later changes
// to the result.
func runCases(t *testing.T, cases []machineCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.rec(t)
			before := snapshot(t, in)
			res := tc.apply(in)
			if after := snapshot(t, in); !bytes.Equal(before, after) {
				t.Fatalf("the input record was mutated\nbefore: %s\nafter:  %s", before, after)
			}
			tc.check(t, in, res)
			scribble(&res.Record)
			if after := snapshot(t, in); !bytes.Equal(before, after) {
				t.Fatalf("the result shares memory with the input record\nbefore: %s\nafter:  %s", before, after)
			}
		})
	}
}

// scribble overwrites every part of a record that applying a vote or
// command may produce.
func scribble(rec *contracts.Record) {
	for i := range rec.Votes {
		rec.Votes[i].Comment = "scribbled"
		rec.Votes[i].Approver.ID = "scribbled"
	}
	for i := range rec.RefusedVotes {
		rec.RefusedVotes[i].Reason = "scribbled"
	}
	if rec.Outcome != nil {
		rec.Outcome.Comment = "scribbled"
		rec.Outcome.Decision = "scribbled"
		rec.Outcome.DecidedAt = time.Time{}
	}
	if rec.Claim != nil {
		rec.Claim.ClaimID = "scribbled"
	}
	rec.Status = "scribbled"
}

func wantPending(t *testing.T, res approval.Result, votes int) {
	t.Helper()
	if !res.Changed || res.Decided || res.Duplicate || res.Refusal != "" {
		t.Fatalf("result = changed %v decided %v duplicate %v refusal %q, want a counted vote that does not decide",
			res.Changed, res.Decided, res.Duplicate, res.Refusal)
	}
	if res.Record.Status != contracts.StatusPending || res.Record.Outcome != nil {
		t.Errorf("status %s, outcome %+v; want pending without outcome", res.Record.Status, res.Record.Outcome)
	}
	if len(res.Record.Votes) != votes {
		t.Errorf("%d votes counted, want %d", len(res.Record.Votes), votes)
	}
}

func wantDecided(t *testing.T, res approval.Result, status, decision string, by []string, now time.Time) *contracts.Outcome {
	t.Helper()
	if !res.Changed || !res.Decided || res.Duplicate || res.Refusal != "" {
		t.Fatalf("result = changed %v decided %v duplicate %v refusal %q, want a decision",
			res.Changed, res.Decided, res.Duplicate, res.Refusal)
	}
	rec := res.Record
	if rec.Status != status {
		t.Fatalf("status = %s, want %s", rec.Status, status)
	}
	out := rec.Outcome
	if out == nil {
		t.Fatal("no outcome")
	}
	if out.Decision != decision || !slices.Equal(out.DecidedBy, by) || !out.DecidedAt.Equal(now) {
		t.Errorf("outcome decision %q by %v at %s, want %q by %v at %s",
			out.Decision, out.DecidedBy, out.DecidedAt, decision, by, now)
	}
	if !rec.UpdatedAt.Equal(now) {
		t.Errorf("updated_at = %s, want %s", rec.UpdatedAt, now)
	}
	return out
}

// wantRefused checks a refused vote: recorded with its reason, nothing
// else changed.
func wantRefused(reason string, v contracts.Vote, now time.Time) func(*testing.T, contracts.Record, approval.Result) {
	return func(t *testing.T, in contracts.Record, res approval.Result) {
		t.Helper()
		if res.Refusal != reason {
			t.Fatalf("refusal = %q, want %q", res.Refusal, reason)
		}
		if !res.Changed || res.Decided || res.Duplicate {
			t.Fatalf("result = changed %v decided %v duplicate %v, want the refusal recorded", res.Changed, res.Decided, res.Duplicate)
		}
		rec := res.Record
		want := contracts.RefusedVote{VoteID: v.VoteID, Approver: v.Approver, Decision: v.Decision, Reason: reason, At: now}
		n := len(rec.RefusedVotes)
		if n != len(in.RefusedVotes)+1 {
			t.Fatalf("refused votes = %+v, want %+v appended", rec.RefusedVotes, want)
		}
		// invalid_arguments says what is invalid; other reasons need no detail.
		got := rec.RefusedVotes[n-1]
		if (got.Detail != "") != (reason == contracts.ReasonInvalidArguments) {
			t.Errorf("refused vote detail %q for reason %s", got.Detail, reason)
		}
		got.Detail = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("refused votes = %+v, want %+v appended", rec.RefusedVotes, want)
		}
		if rec.Status != in.Status || !reflect.DeepEqual(rec.Votes, in.Votes) || !reflect.DeepEqual(rec.Outcome, in.Outcome) {
			t.Errorf("a refused vote changed the record: status %s votes %d outcome %+v", rec.Status, len(rec.Votes), rec.Outcome)
		}
	}
}

// wantNoChange checks a result that must not be written.
func wantNoChange(duplicate bool, refusal string) func(*testing.T, contracts.Record, approval.Result) {
	return func(t *testing.T, _ contracts.Record, res approval.Result) {
		t.Helper()
		if res.Changed || res.Decided || res.Duplicate != duplicate || res.Refusal != refusal {
			t.Errorf("result = changed %v decided %v duplicate %v refusal %q; want no change, duplicate %v, refusal %q",
				res.Changed, res.Decided, res.Duplicate, res.Refusal, duplicate, refusal)
		}
	}
}

func applyVote(v contracts.Vote, now time.Time) func(contracts.Record) approval.Result {
	return func(rec contracts.Record) approval.Result { return approval.ApplyVote(rec, v, now) }
}

func applyCommand(c contracts.Command, now time.Time) func(contracts.Record) approval.Result {
	return func(rec contracts.Record) approval.Result { return approval.ApplyCommand(rec, c, now) }
}

func expire(now time.Time) func(contracts.Record) approval.Result {
	return func(rec contracts.Record) approval.Result { return approval.Expire(rec, now) }
}

func wantJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s is not JSON: %v: %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func TestApplyVoteDecides(t *testing.T) {
	runCases(t, []machineCase{
		{
			name:  "approve with quorum 1 approves the requested arguments",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionApprove, comment("fine"), saw(hash(t, requestedArgs))), at(5)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"alice"}, at(5))
				wantJSON(t, "outcome arguments", out.Arguments, requestedArgs)
				if out.ArgumentsSHA256 != in.Request.ToolCall.ArgumentsSHA256 {
					t.Errorf("outcome sha = %s, want the request's %s", out.ArgumentsSHA256, in.Request.ToolCall.ArgumentsSHA256)
				}
				if len(out.Diff) != 0 || out.Comment != "fine" {
					t.Errorf("outcome diff %s comment %q, want no diff and the vote's comment", out.Diff, out.Comment)
				}
				if len(res.Record.Votes) != 1 || res.Record.Votes[0].VoteID != "v1" {
					t.Errorf("votes = %+v, want v1", res.Record.Votes)
				}
			},
		},
		{
			name:  "reject vetoes with the comment as reason",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, quorum(2))) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionReject, comment("wrong customer")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusRejected, contracts.DecisionReject, []string{"bob"}, at(5))
				if out.Reason != "wrong customer" || len(out.Arguments) != 0 || out.ArgumentsSHA256 != "" {
					t.Errorf("outcome reason %q arguments %s sha %q, want the comment and no arguments", out.Reason, out.Arguments, out.ArgumentsSHA256)
				}
			},
		},
		{
			name:  "without veto one reject of three approvers for quorum 2 does not decide",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, quorum(2), noVeto)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionReject), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) { wantPending(t, res, 1) },
		},
		{
			name: "without veto a second reject makes approval impossible",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2), noVeto), vote("v1", "alice", contracts.DecisionReject))
			},
			apply: applyVote(vote("v2", "bob", contracts.DecisionReject, comment("no")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusRejected, contracts.DecisionReject, []string{"bob"}, at(5))
				if out.Reason != "no" {
					t.Errorf("reason = %q, want no", out.Reason)
				}
			},
		},
		{
			name: "without veto two approvals outweigh one reject",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2), noVeto),
					vote("v1", "alice", contracts.DecisionReject), vote("v2", "bob", contracts.DecisionApprove))
			},
			apply: applyVote(vote("v3", "carol", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"bob", "carol"}, at(5))
			},
		},
		{
			name:  "quorum 2: the first approval does not decide",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, quorum(2))) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) { wantPending(t, res, 1) },
		},
		{
			name: "quorum 2: a second distinct approver decides",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: applyVote(vote("v2", "carol", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"alice", "carol"}, at(5))
				wantJSON(t, "outcome arguments", out.Arguments, requestedArgs)
			},
		},
		{
			name:  "respond decides without execution",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: applyVote(vote("v1", "carol", contracts.DecisionRespond, comment("use a credit note instead")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusResponded, contracts.DecisionRespond, []string{"carol"}, at(5))
				if out.Comment != "use a credit note instead" || len(out.Arguments) != 0 {
					t.Errorf("outcome comment %q arguments %s, want the feedback and no arguments", out.Comment, out.Arguments)
				}
			},
		},
		{
			name: "answer on a human_input request",
			rec:  func(t *testing.T) contracts.Record { return record(t, request(t, humanInput)) },
			apply: applyVote(vote("v1", "bob", contracts.DecisionAnswer, func(v *contracts.Vote) {
				v.Answer = &contracts.Answer{Action: "accept", Content: json.RawMessage(`{"cost_centre":"CC-200"}`)}
			}), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusAnswered, contracts.DecisionAnswer, []string{"bob"}, at(5))
				wantJSON(t, "answer content", out.Arguments, `{"cost_centre":"CC-200"}`)
			},
		},
		{
			name: "an approver added by a reached escalation tier counts",
			rec: func(t *testing.T) contracts.Record {
				rec := record(t, request(t, func(r *contracts.ApprovalRequested) {
					r.Escalation = []contracts.EscalationTier{{After: "2h", Approvers: []string{"dana"}}}
				}))
				rec.EscalationLevel = 1
				return rec
			},
			apply: applyVote(vote("v1", "dana", contracts.DecisionApprove), at(150)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"dana"}, at(150))
			},
		},
		{
			name:  "reject by the requester is allowed",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover)) },
			apply: applyVote(vote("v1", "erin", contracts.DecisionReject, comment("I asked by mistake")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusRejected, contracts.DecisionReject, []string{"erin"}, at(5))
			},
		},
		{
			name:  "the requester approves when self approval is allowed",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover, allowSelf)) },
			apply: applyVote(vote("v1", "erin", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"erin"}, at(5))
			},
		},
		{
			name:  "the owner approves when self approval is allowed",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover, allowSelf)) },
			apply: applyVote(vote("v1", "frank", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"frank"}, at(5))
			},
		},
		{
			name:  "anyone may approve with an open approver list",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover)) },
			apply: applyVote(vote("v1", "zoe", contracts.DecisionApprove), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"zoe"}, at(5))
			},
		},
	})
}

func TestApplyVoteRefuses(t *testing.T) {
	stale := hash(t, `{"amount":1000}`)
	approved := func(t *testing.T) contracts.Record {
		return record(t, request(t), vote("v1", "alice", contracts.DecisionApprove))
	}
	cases := []struct {
		name   string
		rec    func(t *testing.T) contracts.Record
		v      contracts.Vote
		reason string
	}{
		{"same approver twice", func(t *testing.T) contracts.Record {
			return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
		}, vote("v2", "alice", contracts.DecisionApprove), contracts.ReasonDuplicateVote},
		{"same approver changing their mind", func(t *testing.T) contracts.Record {
			return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
		}, vote("v2", "alice", contracts.DecisionReject), contracts.ReasonDuplicateVote},
		{"vote on an approved record", approved, vote("v2", "bob", contracts.DecisionReject), contracts.ReasonClosed},
		{"vote on a rejected record", func(t *testing.T) contracts.Record {
			return record(t, request(t), vote("v1", "alice", contracts.DecisionReject))
		}, vote("v2", "bob", contracts.DecisionApprove), contracts.ReasonClosed},
		{"decision not in allowed_decisions", func(t *testing.T) contracts.Record {
			return record(t, request(t, func(r *contracts.ApprovalRequested) {
				r.AllowedDecisions = []string{contracts.DecisionApprove, contracts.DecisionReject}
			}))
		}, vote("v1", "alice", contracts.DecisionEdit, args(editedArgs)), contracts.ReasonDecisionNotAllowed},
		{"answer on a tool approval", func(t *testing.T) contracts.Record {
			return record(t, request(t, func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{} }))
		}, vote("v1", "alice", contracts.DecisionAnswer, func(v *contracts.Vote) {
			v.Answer = &contracts.Answer{Action: "accept", Content: json.RawMessage(`{}`)}
		}), contracts.ReasonDecisionNotAllowed},
		{"approve on a human_input request", func(t *testing.T) contracts.Record {
			return record(t, request(t, humanInput, func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{} }))
		}, vote("v1", "alice", contracts.DecisionApprove), contracts.ReasonDecisionNotAllowed},
		{"answer with an unknown action", func(t *testing.T) contracts.Record {
			return record(t, request(t, humanInput))
		}, vote("v1", "alice", contracts.DecisionAnswer, func(v *contracts.Vote) {
			v.Answer = &contracts.Answer{Action: "maybe"}
		}), contracts.ReasonInvalidArguments},
		{"stale arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionApprove, saw(stale)), contracts.ReasonStaleArguments},
		{"reject of stale arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionReject, saw(stale)), contracts.ReasonStaleArguments},
		{"not an approver", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "mallory", contracts.DecisionApprove), contracts.ReasonNotAnApprover},
		{"not an approver rejecting", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "mallory", contracts.DecisionReject), contracts.ReasonNotAnApprover},
		{"escalation approver before the tier is reached", func(t *testing.T) contracts.Record {
			return record(t, request(t, func(r *contracts.ApprovalRequested) {
				r.Escalation = []contracts.EscalationTier{{After: "2h", Approvers: []string{"dana"}}}
			}))
		}, vote("v1", "dana", contracts.DecisionApprove), contracts.ReasonNotAnApprover},
		{"requester approving", func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover)) },
			vote("v1", "erin", contracts.DecisionApprove), contracts.ReasonSelfApproval},
		{"owner approving", func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover)) },
			vote("v1", "frank", contracts.DecisionApprove), contracts.ReasonSelfApproval},
		{"requester listed as approver approving", func(t *testing.T) contracts.Record {
			return record(t, request(t, func(r *contracts.ApprovalRequested) {
				r.Quorum.Approvers = append(r.Quorum.Approvers, "erin")
			}))
		}, vote("v1", "erin", contracts.DecisionApprove), contracts.ReasonSelfApproval},
		{"owner editing", func(t *testing.T) contracts.Record { return record(t, request(t, anyApprover)) },
			vote("v1", "frank", contracts.DecisionEdit, args(editedArgs)), contracts.ReasonSelfApproval},
		{"edit with array arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionEdit, args(`["amount",80]`)), contracts.ReasonInvalidArguments},
		{"edit with string arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionEdit, args(`"amount=80"`)), contracts.ReasonInvalidArguments},
		{"edit with null arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionEdit, args(`null`)), contracts.ReasonInvalidArguments},
		{"edit without arguments", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionEdit), contracts.ReasonInvalidArguments},
		{"edit with broken JSON", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionEdit, args(`{"amount":`)), contracts.ReasonInvalidArguments},
		{"vote for another event", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", contracts.DecisionApprove, func(v *contracts.Vote) { v.EventID = "other" }), contracts.ReasonMalformed},
		{"unknown decision", func(t *testing.T) contracts.Record { return record(t, request(t)) },
			vote("v1", "alice", "maybe"), contracts.ReasonMalformed},
	}
	var mc []machineCase
	for _, c := range cases {
		mc = append(mc, machineCase{
			name: c.name, rec: c.rec, apply: applyVote(c.v, at(30)), check: wantRefused(c.reason, c.v, at(30)),
		})
	}
	runCases(t, mc)
}

func TestApplyVoteDuplicates(t *testing.T) {
	runCases(t, []machineCase{
		{
			name: "a counted vote_id again changes nothing",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: applyVote(vote("v1", "alice", contracts.DecisionApprove), at(9)),
			check: wantNoChange(true, ""),
		},
		{
			name: "a vote_id again changes nothing even with another body",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: applyVote(vote("v1", "bob", contracts.DecisionReject), at(9)),
			check: wantNoChange(true, ""),
		},
		{
			name: "a refused vote_id again changes nothing",
			rec: func(t *testing.T) contracts.Record {
				res := approval.ApplyVote(record(t, request(t)), vote("v1", "mallory", contracts.DecisionApprove), at(1))
				if res.Refusal != contracts.ReasonNotAnApprover {
					t.Fatalf("setting up: refusal %q", res.Refusal)
				}
				return res.Record
			},
			apply: applyVote(vote("v1", "mallory", contracts.DecisionApprove), at(9)),
			check: wantNoChange(true, ""),
		},
		{
			name: "the deciding vote again changes nothing",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t), vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: applyVote(vote("v1", "alice", contracts.DecisionApprove), at(9)),
			check: wantNoChange(true, ""),
		},
	})
}

func TestApplyVoteEdit(t *testing.T) {
	requested := hash(t, requestedArgs)
	edited := hash(t, editedArgs)
	const wantDiff = `[
		{"op":"replace","path":"/amount","value":80},
		{"op":"add","path":"/meta/note","value":"partial"},
		{"op":"remove","path":"/reason"}
	]`
	wantEdited := func(t *testing.T, out *contracts.Outcome) {
		t.Helper()
		wantJSON(t, "outcome arguments", out.Arguments, editedArgs)
		if out.ArgumentsSHA256 != edited {
			t.Errorf("outcome sha = %q, want the edited arguments' %s (the request's is %s)", out.ArgumentsSHA256, edited, requested)
		}
		if sum, err := contracts.ArgumentsSHA256(out.Arguments); err != nil || sum != out.ArgumentsSHA256 {
			t.Errorf("outcome sha %q does not hash its own arguments (%q, %v): a permit could never be claimed", out.ArgumentsSHA256, sum, err)
		}
		if len(out.Diff) == 0 {
			t.Fatal("no diff")
		}
		wantJSON(t, "outcome diff", out.Diff, wantDiff)
	}
	runCases(t, []machineCase{
		{
			name: "edit approves the new arguments with their hash and a diff",
			rec:  func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(editedArgs), saw(requested),
				comment("refund 80 only")), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionEdit, []string{"alice"}, at(5))
				wantEdited(t, out)
				if out.Comment != "refund 80 only" {
					t.Errorf("comment = %q", out.Comment)
				}
			},
		},
		{
			name:  "edit without the hash the approver saw",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, args(editedArgs)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantEdited(t, wantDecided(t, res, contracts.StatusApproved, contracts.DecisionEdit, []string{"alice"}, at(5)))
			},
		},
		{
			name: "edit to the same arguments keeps the request's hash and has no diff",
			rec:  func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: applyVote(vote("v1", "alice", contracts.DecisionEdit, saw(requested),
				args(`{"reason":"duplicate","meta":{"ticket":"T-1"},"currency":"eur","amount":100.0}`)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionEdit, []string{"alice"}, at(5))
				if out.ArgumentsSHA256 != requested || len(out.Diff) != 0 {
					t.Errorf("outcome sha %s diff %s, want the request's hash and no diff", out.ArgumentsSHA256, out.Diff)
				}
			},
		},
		{
			name: "quorum 2: an edit does not count an earlier approval of other arguments",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove, saw(requested)))
			},
			apply: applyVote(vote("v2", "bob", contracts.DecisionEdit, args(editedArgs), saw(requested)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) { wantPending(t, res, 2) },
		},
		{
			name: "quorum 2: an approval of the edited arguments decides",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)),
					vote("v1", "alice", contracts.DecisionApprove, saw(requested)),
					vote("v2", "bob", contracts.DecisionEdit, args(editedArgs), saw(requested)))
			},
			apply: applyVote(vote("v3", "carol", contracts.DecisionApprove, saw(edited)), at(5)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"bob", "carol"}, at(5))
				wantEdited(t, out)
			},
		},
		{
			name: "quorum 2: after an edit, an approval of the requested arguments is stale",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)),
					vote("v1", "alice", contracts.DecisionApprove, saw(requested)),
					vote("v2", "bob", contracts.DecisionEdit, args(editedArgs), saw(requested)))
			},
			apply: applyVote(vote("v3", "carol", contracts.DecisionApprove, saw(requested)), at(5)),
			check: wantRefused(contracts.ReasonStaleArguments,
				vote("v3", "carol", contracts.DecisionApprove, saw(requested)), at(5)),
		},
	})
}

func TestApplyVoteCapsRefusedVotes(t *testing.T) {
	const extra = 7
	total := contracts.MaxRefusedVotes + extra
	rec := record(t, request(t))
	for i := range total {
		in := rec
		before := snapshot(t, in)
		v := vote(fmt.Sprintf("r%03d", i), fmt.Sprintf("mallory%d", i), contracts.DecisionApprove)
		res := approval.ApplyVote(in, v, at(i))
		if res.Refusal != contracts.ReasonNotAnApprover || !res.Changed {
			t.Fatalf("vote %d: refusal %q changed %v", i, res.Refusal, res.Changed)
		}
		if !bytes.Equal(before, snapshot(t, in)) {
			t.Fatalf("vote %d mutated the input record", i)
		}
		rec = res.Record
	}
	if n := len(rec.RefusedVotes); n != contracts.MaxRefusedVotes {
		t.Fatalf("%d refused votes kept, want %d", n, contracts.MaxRefusedVotes)
	}
	if rec.RefusedVotesOmitted != extra {
		t.Errorf("refused_votes_omitted = %d, want %d", rec.RefusedVotesOmitted, extra)
	}
	for i, rv := range rec.RefusedVotes {
		if want := fmt.Sprintf("r%03d", i+extra); rv.VoteID != want {
			t.Fatalf("refused vote %d = %s, want %s: the newest are kept, oldest first", i, rv.VoteID, want)
		}
	}
	if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
		t.Errorf("status %s with %d votes, want pending with none", rec.Status, len(rec.Votes))
	}
	// The record still decides normally.
	res := approval.ApplyVote(rec, vote("v1", "alice", contracts.DecisionApprove), at(total+1))
	wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove, []string{"alice"}, at(total+1))
	if len(res.Record.RefusedVotes) != contracts.MaxRefusedVotes || res.Record.RefusedVotesOmitted != extra {
		t.Errorf("deciding changed the refused votes: %d kept, %d omitted", len(res.Record.RefusedVotes), res.Record.RefusedVotesOmitted)
	}
}

// TestApplyVoteIndependentResults applies two votes to the same record: each
// result stands on its own.
func TestApplyVoteIndependentResults(t *testing.T) {
	rec := record(t, request(t, quorum(3)), vote("v1", "alice", contracts.DecisionApprove))
	rec.Votes = slices.Grow(rec.Votes, 8) // spare capacity an append could share
	a := approval.ApplyVote(rec, vote("v2", "bob", contracts.DecisionApprove), at(5))
	b := approval.ApplyVote(rec, vote("v3", "carol", contracts.DecisionApprove), at(6))
	if len(a.Record.Votes) != 2 || a.Record.Votes[1].VoteID != "v2" {
		t.Errorf("first result votes = %+v, want v1 and v2", a.Record.Votes)
	}
	if len(b.Record.Votes) != 2 || b.Record.Votes[1].VoteID != "v3" {
		t.Errorf("second result votes = %+v, want v1 and v3", b.Record.Votes)
	}
	if len(rec.Votes) != 1 {
		t.Errorf("input has %d votes, want 1", len(rec.Votes))
	}
}

func TestApplyCommand(t *testing.T) {
	pending := func(t *testing.T) contracts.Record { return record(t, request(t)) }
	approved := func(t *testing.T) contracts.Record {
		return record(t, request(t), vote("v1", "alice", contracts.DecisionApprove))
	}
	claimed := func(t *testing.T) contracts.Record {
		res := approval.ApplyCommand(approved(t), command("c1", contracts.CommandClaim, "billing",
			func(c *contracts.Command) { c.ClaimID = "claim-1" }), at(10))
		if !res.Changed || res.Record.Claim == nil {
			t.Fatalf("setting up: claim not applied: %+v", res)
		}
		return res.Record
	}
	cancelled := func(t *testing.T) contracts.Record {
		res := approval.ApplyCommand(pending(t), command("c1", contracts.CommandCancel, "frank"), at(10))
		if !res.Decided {
			t.Fatalf("setting up: cancel not applied: %+v", res)
		}
		return res.Record
	}
	claim := func(id, claimID string) contracts.Command {
		return command(id, contracts.CommandClaim, "billing", func(c *contracts.Command) { c.ClaimID = claimID })
	}
	extend := func(id string, until time.Time) contracts.Command {
		return command(id, contracts.CommandExtend, "alice", func(c *contracts.Command) { c.Until = until })
	}

	runCases(t, []machineCase{
		{
			name: "claim of a pending approval", rec: pending, apply: applyCommand(claim("c1", "claim-1"), at(20)),
			check: wantNoChange(false, contracts.ReasonNotApproved),
		},
		{
			name: "claim of a rejected approval",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t), vote("v1", "alice", contracts.DecisionReject))
			},
			apply: applyCommand(claim("c1", "claim-1"), at(20)),
			check: wantNoChange(false, contracts.ReasonNotApproved),
		},
		{
			name: "claim of an approved approval", rec: approved, apply: applyCommand(claim("c1", "claim-1"), at(14)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				if !res.Changed || res.Decided || res.Duplicate || res.Refusal != "" {
					t.Fatalf("result %+v, want the claim applied", res)
				}
				want := &contracts.Claim{ClaimID: "claim-1", At: at(14), By: "billing"}
				if !reflect.DeepEqual(res.Record.Claim, want) {
					t.Errorf("claim = %+v, want %+v", res.Record.Claim, want)
				}
				if res.Record.Status != contracts.StatusApproved || !reflect.DeepEqual(res.Record.Outcome, in.Outcome) {
					t.Errorf("claiming changed the outcome: %s %+v", res.Record.Status, res.Record.Outcome)
				}
			},
		},
		{
			name: "the same claim again", rec: claimed, apply: applyCommand(claim("c2", "claim-1"), at(14)),
			check: wantNoChange(true, ""),
		},
		{
			name: "another claim", rec: claimed, apply: applyCommand(claim("c3", "claim-2"), at(14)),
			check: wantNoChange(false, contracts.ReasonAlreadyClaimed),
		},
		{
			name: "cancel of a pending approval", rec: pending,
			apply: applyCommand(command("c1", contracts.CommandCancel, "frank"), at(20)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusCancelled, contracts.CommandCancel, []string{"frank"}, at(20))
				if len(out.Arguments) != 0 || out.ArgumentsSHA256 != "" {
					t.Errorf("a cancelled outcome carries arguments %s %s", out.Arguments, out.ArgumentsSHA256)
				}
			},
		},
		{
			name: "the same cancel again", rec: cancelled,
			apply: applyCommand(command("c1", contracts.CommandCancel, "frank"), at(21)),
			check: wantNoChange(true, ""),
		},
		{
			name: "another cancel of a cancelled approval", rec: cancelled,
			apply: applyCommand(command("c2", contracts.CommandCancel, "frank"), at(21)),
			check: wantNoChange(false, contracts.ReasonClosed),
		},
		{
			name: "cancel of an approved approval", rec: approved,
			apply: applyCommand(command("c1", contracts.CommandCancel, "frank"), at(20)),
			check: wantNoChange(false, contracts.ReasonClosed),
		},
		{
			name: "extend moves the deadline", rec: pending, apply: applyCommand(extend("c1", t0.Add(48*time.Hour)), at(20)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				if !res.Changed || res.Decided || res.Refusal != "" {
					t.Fatalf("result %+v, want the extension applied", res)
				}
				if !res.Record.ExpiresAt.Equal(t0.Add(48*time.Hour)) || res.Record.Status != contracts.StatusPending {
					t.Errorf("expires_at %s status %s, want %s and pending", res.Record.ExpiresAt, res.Record.Status, t0.Add(48*time.Hour))
				}
				if !res.Record.Request.ExpiresAt.Equal(in.Request.ExpiresAt) {
					t.Error("extending changed the request snapshot")
				}
				if !res.Record.UpdatedAt.Equal(at(20)) {
					t.Errorf("updated_at = %s", res.Record.UpdatedAt)
				}
			},
		},
		{
			// A shorter deadline could let on_timeout approve sooner than
			// the rule says (or cut the approvers' time): refused.
			name: "extend never shortens the deadline", rec: pending, apply: applyCommand(extend("c1", at(60)), at(20)),
			check: wantNoChange(false, contracts.ReasonDeadlineNotLater),
		},
		{
			name: "extend by someone who is no approver", rec: pending,
			apply: applyCommand(command("c1", contracts.CommandExtend, "nobody", func(c *contracts.Command) { c.Until = t0.Add(48 * time.Hour) }), at(20)),
			check: wantNoChange(false, contracts.ReasonNotPermitted),
		},
		{
			name: "extend by the requester", rec: pending,
			apply: applyCommand(command("c1", contracts.CommandExtend, "erin", func(c *contracts.Command) { c.Until = t0.Add(48 * time.Hour) }), at(20)),
			check: wantNoChange(false, contracts.ReasonNotPermitted),
		},
		{
			name: "cancel by someone unrelated", rec: pending,
			apply: applyCommand(command("c1", contracts.CommandCancel, "nobody"), at(20)),
			check: wantNoChange(false, contracts.ReasonNotPermitted),
		},
		{
			name: "cancel by the run's agent", rec: pending,
			apply: applyCommand(command("c1", contracts.CommandCancel, "billing"), at(20)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusCancelled, contracts.CommandCancel, []string{"billing"}, at(20))
			},
		},
		{
			name: "claim by someone other than the submitting agent", rec: approved,
			apply: applyCommand(command("c1", contracts.CommandClaim, "alice", func(c *contracts.Command) { c.ClaimID = "claim-1" }), at(14)),
			check: wantNoChange(false, contracts.ReasonNotPermitted),
		},
		{
			name: "claim after claim_within: the approval lapsed", rec: approved, apply: applyCommand(claim("c1", "claim-1"), at(40)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				if !res.Changed || res.Refusal != contracts.ReasonApprovalLapsed || res.Record.Claim != nil {
					t.Fatalf("result %+v, want approval_lapsed, recorded", res)
				}
				if res.Record.LapsedAt == nil || !res.Record.LapsedAt.Equal(at(40)) || res.Record.Status != contracts.StatusApproved {
					t.Errorf("lapsed_at %v status %s, want %s and approved", res.Record.LapsedAt, res.Record.Status, at(40))
				}
				again := approval.ApplyCommand(res.Record, claim("c2", "claim-2"), at(41))
				if again.Changed || again.Refusal != contracts.ReasonApprovalLapsed {
					t.Errorf("a second claim of a lapsed approval: %+v, want approval_lapsed without a write", again)
				}
			},
		},
		{
			name: "claim_within from the rule", rec: func(t *testing.T) contracts.Record {
				req := request(t)
				req.ClaimWithin = "1h"
				return record(t, req, vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: applyCommand(claim("c1", "claim-1"), at(50)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				if !res.Changed || res.Refusal != "" || res.Record.Claim == nil {
					t.Fatalf("result %+v, want the claim applied within the rule's hour", res)
				}
			},
		},
		{
			name: "extend to the same deadline again", rec: pending, apply: applyCommand(extend("c1", t0.Add(24*time.Hour)), at(20)),
			check: wantNoChange(true, ""),
		},
		{
			name: "extend into the past", rec: pending, apply: applyCommand(extend("c1", at(19)), at(20)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				if res.Changed || res.Refusal == "" || res.Duplicate {
					t.Errorf("result changed %v duplicate %v refusal %q, want a refusal", res.Changed, res.Duplicate, res.Refusal)
				}
			},
		},
		{
			name: "extend to now", rec: pending, apply: applyCommand(extend("c1", at(20)), at(20)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				if res.Changed || res.Refusal == "" {
					t.Errorf("result changed %v refusal %q, want a refusal", res.Changed, res.Refusal)
				}
			},
		},
		{
			name: "extend of a decided approval", rec: approved, apply: applyCommand(extend("c1", t0.Add(48*time.Hour)), at(20)),
			check: wantNoChange(false, contracts.ReasonClosed),
		},
		{
			name: "unknown command", rec: pending, apply: applyCommand(command("c1", "pause", "frank"), at(20)),
			check: wantNoChange(false, contracts.ReasonMalformed),
		},
	})
}

func TestExpire(t *testing.T) {
	deadline := t0.Add(24 * time.Hour)
	runCases(t, []machineCase{
		{
			name:  "before the deadline",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: expire(deadline.Add(-time.Nanosecond)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				if res.Changed || res.Decided {
					t.Errorf("result changed %v decided %v, want no change", res.Changed, res.Decided)
				}
			},
		},
		{
			name:  "at the deadline",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t)) },
			apply: expire(deadline),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				wantDecided(t, res, contracts.StatusExpired, contracts.DecisionReject, []string{contracts.DecidedByTimeout}, deadline)
			},
		},
		{
			name: "after the deadline, with a vote short of quorum",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t, quorum(2)), vote("v1", "alice", contracts.DecisionApprove))
			},
			apply: expire(deadline.Add(time.Second)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusExpired, contracts.DecisionReject,
					[]string{contracts.DecidedByTimeout}, deadline.Add(time.Second))
				if len(out.Arguments) != 0 || out.ArgumentsSHA256 != "" {
					t.Errorf("an expired outcome carries arguments %s %s", out.Arguments, out.ArgumentsSHA256)
				}
				if len(res.Record.Votes) != 1 {
					t.Errorf("expiry dropped votes: %+v", res.Record.Votes)
				}
			},
		},
		{
			name: "an extended deadline counts, not the requested one",
			rec: func(t *testing.T) contracts.Record {
				rec := record(t, request(t))
				rec.ExpiresAt = deadline.Add(time.Hour)
				return rec
			},
			apply: expire(deadline.Add(time.Minute)),
			check: wantNoChange(true, ""),
		},
		{
			name:  "on_timeout approve approves the requested arguments",
			rec:   func(t *testing.T) contracts.Record { return record(t, request(t, onTimeoutApprove)) },
			apply: expire(deadline.Add(time.Second)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				out := wantDecided(t, res, contracts.StatusApproved, contracts.DecisionApprove,
					[]string{contracts.DecidedByTimeout}, deadline.Add(time.Second))
				wantJSON(t, "outcome arguments", out.Arguments, requestedArgs)
				if out.ArgumentsSHA256 != in.Request.ToolCall.ArgumentsSHA256 {
					t.Errorf("outcome sha = %s, want the request's", out.ArgumentsSHA256)
				}
			},
		},
		{
			name: "a decided record does not expire",
			rec: func(t *testing.T) contracts.Record {
				return record(t, request(t), vote("v1", "alice", contracts.DecisionReject))
			},
			apply: expire(deadline.Add(time.Hour)),
			check: func(t *testing.T, in contracts.Record, res approval.Result) {
				if res.Changed || res.Decided {
					t.Errorf("result changed %v decided %v, want no change", res.Changed, res.Decided)
				}
			},
		},
		{
			name: "an expired record does not expire again",
			rec: func(t *testing.T) contracts.Record {
				res := approval.Expire(record(t, request(t)), deadline)
				if !res.Decided {
					t.Fatal("setting up: not expired")
				}
				return res.Record
			},
			apply: expire(deadline.Add(time.Hour)),
			check: func(t *testing.T, _ contracts.Record, res approval.Result) {
				if res.Changed || res.Decided {
					t.Errorf("result changed %v decided %v, want no change", res.Changed, res.Decided)
				}
			},
		},
	})
}

func TestNewRecord(t *testing.T) {
	req := request(t)
	rec := approval.NewRecord(req, at(1))
	if rec.Spec != contracts.SpecRecord || rec.Status != contracts.StatusPending || rec.Terminal() {
		t.Errorf("spec %s status %s, want a pending %s", rec.Spec, rec.Status, contracts.SpecRecord)
	}
	if !rec.ExpiresAt.Equal(req.ExpiresAt) || !rec.UpdatedAt.Equal(at(1)) {
		t.Errorf("expires_at %s updated_at %s", rec.ExpiresAt, rec.UpdatedAt)
	}
	if rec.Votes == nil || rec.RefusedVotes == nil || rec.Outcome != nil || rec.Claim != nil {
		t.Errorf("votes %v refused %v outcome %v claim %v, want empty lists and no outcome or claim",
			rec.Votes, rec.RefusedVotes, rec.Outcome, rec.Claim)
	}
	if !reflect.DeepEqual(rec.Request, req) {
		t.Error("the record's request differs from the request")
	}
}

func TestDiff(t *testing.T) {
	cases := []struct {
		name     string
		from, to string
		want     string
	}{
		{"equal", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, `[]`},
		{"equal numbers written differently", `{"a":1}`, `{"a":1.0}`, `[]`},
		{"add", `{"a":1}`, `{"a":1,"b":{"c":true}}`, `[{"op":"add","path":"/b","value":{"c":true}}]`},
		{"add null", `{}`, `{"a":null}`, `[{"op":"add","path":"/a","value":null}]`},
		{"remove", `{"a":1,"b":2}`, `{"a":1}`, `[{"op":"remove","path":"/b"}]`},
		{"replace", `{"a":1}`, `{"a":"one"}`, `[{"op":"replace","path":"/a","value":"one"}]`},
		{"replace with null", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null}]`},
		{
			"nested add, remove and replace",
			`{"user":{"name":"Ann","address":{"city":"Oslo","zip":"0150"},"tags":["a"]},"keep":1}`,
			`{"user":{"name":"Ann","address":{"city":"Bergen","country":"NO"},"tags":["a","b"]},"keep":1}`,
			`[
				{"op":"replace","path":"/user/address/city","value":"Bergen"},
				{"op":"add","path":"/user/address/country","value":"NO"},
				{"op":"remove","path":"/user/address/zip"},
				{"op":"replace","path":"/user/tags","value":["a","b"]}
			]`,
		},
		{"object replaced by a scalar", `{"a":{"b":1}}`, `{"a":2}`, `[{"op":"replace","path":"/a","value":2}]`},
		{"scalar replaced by an object", `{"a":2}`, `{"a":{"b":1}}`, `[{"op":"replace","path":"/a","value":{"b":1}}]`},
		{"slash in a key", `{"a/b":1}`, `{"a/b":2}`, `[{"op":"replace","path":"/a~1b","value":2}]`},
		{"tilde in a key", `{"m~n":{"x":1}}`, `{"m~n":{}}`, `[{"op":"remove","path":"/m~0n/x"}]`},
		{"tilde and slash in a key", `{}`, `{"~/~1":true}`, `[{"op":"add","path":"/~0~1~01","value":true}]`},
		{"empty key", `{"":1}`, `{"":2}`, `[{"op":"replace","path":"/","value":2}]`},
		{"root that is not an object", `[1,2]`, `[1,3]`, `[{"op":"replace","path":"","value":[1,3]}]`},
		{"root object replaced by an array", `{"a":1}`, `[1]`, `[{"op":"replace","path":"","value":[1]}]`},
		{"invalid JSON replaces the root", `{"a":`, `{"a":1}`, `[{"op":"replace","path":"","value":{"a":1}}]`},
		{
			"large integers keep every digit",
			`{"account_id":9007199254740993,"amount":10}`,
			`{"account_id":9007199254740993,"amount":12345678901234567891}`,
			`[{"op":"replace","path":"/amount","value":12345678901234567891}]`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := approval.Diff(json.RawMessage(tc.from), json.RawMessage(tc.to))
			if !json.Valid(got) {
				t.Fatalf("Diff = %s, not JSON", got)
			}
			// Compare with numbers as written, so no digit is lost unseen.
			if g, w := decodeExact(t, got), decodeExact(t, []byte(tc.want)); !reflect.DeepEqual(g, w) {
				t.Errorf("Diff(%s, %s)\n got %s\nwant %s", tc.from, tc.to, got, compactJSON(t, tc.want))
			}
		})
	}
}

// decodeExact decodes JSON keeping numbers as their canonical text.
func decodeExact(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return normalizeNumbers(v)
}

// normalizeNumbers rewrites integers written as decimals (1.0) to their
// integer text and leaves every other number as written.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return json.Number(fmt.Sprint(i))
		}
	}
	return v
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// ApplyVoteWithin hands over the encoding its size check made, so the
// arbiter stores the record without encoding it again: exactly what
// contracts.Marshal makes of the new record, for a vote that decides and
// for one that does not.
func TestApplyVoteWithinReturnsTheEncoding(t *testing.T) {
	lim := contracts.LimitsFor(1 << 20)
	for _, tc := range []struct {
		name    string
		req     contracts.ApprovalRequested
		decided bool
	}{
		{"deciding vote", request(t), true},
		{"counted vote", request(t, approvaltest.Quorum(2)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := approval.NewRecord(tc.req, t0)
			res := approval.ApplyVoteWithin(rec, vote("v-alice", "alice", contracts.DecisionApprove), t0.Add(time.Minute), lim)
			if !res.Changed || res.Refusal != "" || res.Decided != tc.decided {
				t.Fatalf("result %+v", res)
			}
			want, err := contracts.Marshal(res.Record)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Encoded, want) {
				t.Fatalf("encoded:\n%s\nwant:\n%s", res.Encoded, want)
			}
		})
	}
}

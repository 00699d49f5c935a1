package contracts_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// The limit on arguments counts their compact JSON: space around the
// tokens is free, whether the raw text is within the limit or not.
func TestArgumentLimitCountsCompactBytes(t *testing.T) {
	l := contracts.LimitsFor(0)
	// {"a":"xxx…"} with the value sized so the compact form is exactly
	// the limit.
	value := strings.Repeat("x", l.Arguments-len(`{"a":""}`))
	check := func(args string) *contracts.FieldError {
		return l.CheckRequestFields(&contracts.ApprovalRequested{
			ToolCall: &contracts.ToolCall{ID: "c1", Name: "t", Arguments: json.RawMessage(args)},
		})
	}
	for _, tc := range []struct {
		name, args string
		ok         bool
	}{
		{"compact, at the limit", `{"a":"` + value + `"}`, true},
		{"over the limit only by space", "{\n  \"a\" : \"" + value + "\"\n}\n", true},
		{"compact, one byte over", `{"a":"` + value + `x"}`, false},
		{"one byte over, with space", "{ \"a\": \"" + value + "x\" }", false},
		{"small", `{"a":1}`, true},
	} {
		err := check(tc.args)
		if tc.ok != (err == nil) {
			t.Errorf("%s (%d bytes raw): error %v, want ok %v", tc.name, len(tc.args), err, tc.ok)
			continue
		}
		if err != nil && (err.Field != "tool_call.arguments" || !errors.Is(err, contracts.ErrTooLarge)) {
			t.Errorf("%s: error %+v, want too_large on tool_call.arguments", tc.name, err)
		}
	}
}

// A request passes CheckRequest exactly when the record it creates fits
// with its reserve (RecordFits): measuring the record from the request's
// own encoding gives the same byte count as encoding the whole record,
// whatever the text needs escaped.
func TestCheckRequestMeasuresTheRecordExactly(t *testing.T) {
	l := contracts.LimitsFor(0)
	created := time.Date(2026, 11, 24, 17, 3, 4, 120_000_000, time.UTC)
	for _, filler := range []string{"x", "<&>", "é", "\u2028", "\"", "\n"} {
		request := func(n int) contracts.ApprovalRequested {
			return contracts.ApprovalRequested{
				Spec: contracts.SpecApprovalRequested, EventID: "e1", Kind: contracts.KindToolApproval,
				Run:      contracts.Run{ID: "run-1", Agent: "billing-bot", RequestedBy: "alice"},
				ToolCall: &contracts.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount": 5, "memo": "<b>&</b>"}`)},
				Quorum:   contracts.Quorum{Required: 2, Approvers: []string{"bob", "carol"}},
				Summary:  strings.Repeat(filler, n), CreatedAt: created, ExpiresAt: created.Add(time.Hour),
			}
		}
		fits := func(n int) bool {
			req := request(n)
			return l.RecordFits(&contracts.Record{
				Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusPending, ExpiresAt: req.ExpiresAt,
				Votes: []contracts.Vote{}, RefusedVotes: []contracts.RefusedVote{}, UpdatedAt: req.CreatedAt,
			}) == nil
		}
		// The longest filler whose record still fits.
		lo, hi := 0, l.Record
		for lo+1 < hi {
			if mid := (lo + hi) / 2; fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		if !fits(lo) || fits(lo+1) {
			t.Fatalf("%q: no boundary found at %d", filler, lo)
		}
		for _, n := range []int{0, lo / 2, lo, lo + 1, lo + 2} {
			req := request(n)
			data, err := l.EncodeRequest(&req)
			if want := fits(n); (err == nil) != want {
				t.Errorf("%q × %d: EncodeRequest error %v; the record fits: %v", filler, n, err, want)
			}
			if err != nil {
				if !errors.Is(err, contracts.ErrTooLarge) {
					t.Errorf("%q × %d: error %v does not wrap ErrTooLarge", filler, n, err)
				}
				continue
			}
			if want, _ := contracts.Marshal(&req); string(data) != string(want) {
				t.Errorf("%q × %d: EncodeRequest's encoding differs from Marshal", filler, n)
			}
			if err := l.CheckRequest(&req); err != nil {
				t.Errorf("%q × %d: CheckRequest %v where EncodeRequest passed", filler, n, err)
			}
			// The record made around the checked encoding is the record's
			// own encoding, byte for byte.
			rec := contracts.Record{
				Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusPending, ExpiresAt: req.ExpiresAt,
				Votes: []contracts.Vote{}, RefusedVotes: []contracts.RefusedVote{}, UpdatedAt: created.Add(time.Millisecond),
			}
			got, err := contracts.MarshalRecord(&rec, data)
			want, _ := contracts.Marshal(&rec)
			if err != nil || string(got) != string(want) {
				t.Errorf("%q × %d: MarshalRecord (error %v) differs from Marshal:\n%.300s\n%.300s", filler, n, err, got, want)
			}
		}
	}
}

// MarshalRecord gives Marshal's bytes for a record in every state, with
// its request's encoding reused or (nil) made again.
func TestMarshalRecordReusesTheRequestEncoding(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: "e2", Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "r", Agent: "a\u2028<b>"},
		ToolCall: &contracts.ToolCall{ID: "c", Name: "t", Arguments: json.RawMessage(`{"request":{"x":1}}`)},
		Summary:  `"request":{} inside a value`, CreatedAt: at, ExpiresAt: at.Add(time.Hour),
	}
	reqData, err := contracts.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	rec := contracts.Record{
		Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusApproved, ExpiresAt: req.ExpiresAt,
		Votes: []contracts.Vote{{Spec: contracts.SpecVote, VoteID: "v", EventID: "e2", Decision: contracts.DecisionApprove,
			Approver: contracts.Approver{ID: "bob", Via: contracts.ViaNATS}, DecidedAt: at}},
		RefusedVotes: []contracts.RefusedVote{},
		Outcome:      &contracts.Outcome{Decision: contracts.DecisionApprove, DecidedBy: []string{"bob"}, DecidedAt: at},
		Claim:        &contracts.Claim{ClaimID: "k", At: at},
		UpdatedAt:    at,
	}
	want, err := contracts.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, request := range [][]byte{reqData, nil} {
		got, err := contracts.MarshalRecord(&rec, request)
		if err != nil || string(got) != string(want) {
			t.Errorf("request given: %v: MarshalRecord (error %v)\n%s\nwant\n%s", request != nil, err, got, want)
		}
	}
}

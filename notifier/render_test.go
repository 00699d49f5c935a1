package notifier_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

func TestTruncateKeepsRunesAndSaysWhatIsLeftOut(t *testing.T) {
	s := strings.Repeat("€", 1000) // 3 bytes each
	for _, max := range []int{1, 10, 40, 41, 42, 100, 2999} {
		got := notifier.Truncate(s, max)
		if len(got) > max {
			t.Errorf("max %d: got %d bytes", max, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("max %d: cut inside a rune: %q", max, got)
		}
		if max >= 40 && !strings.Contains(got, "more bytes)") {
			t.Errorf("max %d: no note of what was left out: %q", max, got)
		}
	}
	if got := notifier.Truncate("short", 100); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	if got := notifier.Truncate(s, 0); got != s {
		t.Error("max 0 must not cut")
	}
}

func TestFormatJSONIndentsAndCuts(t *testing.T) {
	got := notifier.FormatJSON(json.RawMessage(`{"a":1,"b":[true]}`), 0)
	if got != "{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}" {
		t.Errorf("FormatJSON = %q", got)
	}
	if got := notifier.FormatJSON(json.RawMessage(`{"to":"\u003cb\u003eacme\u0026co","p":"C:\\u003c"}`), 0); got != "{\n  \"to\": \"<b>acme&co\",\n  \"p\": \"C:\\\\u003c\"\n}" {
		t.Errorf("HTML escapes not undone (or an escaped backslash touched): %q", got)
	}
	if got := notifier.FormatJSON(json.RawMessage(`not json`), 0); got != "not json" {
		t.Errorf("invalid JSON changed: %q", got)
	}
	big := json.RawMessage(`{"s":"` + strings.Repeat("x", 5000) + `"}`)
	if got := notifier.FormatJSON(big, 200); len(got) > 200 || !strings.Contains(got, "more bytes") {
		t.Errorf("FormatJSON(big, 200) = %d bytes %q", len(got), got[len(got)-30:])
	}
}

func TestOutcomeLineAndProgress(t *testing.T) {
	req := contracts.ApprovalRequested{Quorum: contracts.Quorum{Required: 2}}
	vote := func(id, via, d string) contracts.Vote {
		return contracts.Vote{Approver: contracts.Approver{ID: id, Via: via}, Decision: d}
	}
	pending := &contracts.Record{Request: req, Status: contracts.StatusPending, Votes: []contracts.Vote{vote("alice", "slack", "approve")}}
	if got := notifier.Progress(&req, pending); got != "1 of 2 approvals" {
		t.Errorf("Progress = %q", got)
	}
	if got := notifier.Progress(&contracts.ApprovalRequested{}, nil); got != "0 of 1 approval" {
		t.Errorf("Progress(no record) = %q", got)
	}
	cases := []struct {
		rec  contracts.Record
		want string
	}{
		{contracts.Record{Request: req, Status: contracts.StatusApproved,
			Votes:   []contracts.Vote{vote("alice", "slack", "approve"), vote("bob", "email", "approve")},
			Outcome: &contracts.Outcome{Decision: "approve", DecidedBy: []string{"alice", "bob"}}},
			"Approved by alice via slack, bob via email, 2 of 2"},
		{contracts.Record{Request: req, Status: contracts.StatusRejected,
			Votes:   []contracts.Vote{vote("carol", "web", "reject")},
			Outcome: &contracts.Outcome{Decision: "reject", DecidedBy: []string{"carol"}, Comment: "too large"}},
			"Rejected by carol via web: too large"},
		{contracts.Record{Request: req, Status: contracts.StatusExpired, Outcome: &contracts.Outcome{DecidedBy: []string{"timeout"}}},
			"Expired (no decision before the deadline)"},
		{contracts.Record{Request: req, Status: contracts.StatusApproved, Outcome: &contracts.Outcome{Decision: "approve", DecidedBy: []string{"timeout"}}},
			"Approved when the deadline passed (the rule approves on timeout)"},
		{contracts.Record{Request: req, Status: contracts.StatusCancelled, Outcome: &contracts.Outcome{DecidedBy: []string{"ops"}}},
			"Cancelled by ops"},
		{*pending, "Pending, 1 of 2 approvals"},
	}
	for _, c := range cases {
		if got := notifier.OutcomeLine(&c.rec); got != c.want {
			t.Errorf("OutcomeLine(%s) = %q, want %q", c.rec.Status, got, c.want)
		}
	}
}

func TestApprovalURL(t *testing.T) {
	if got := notifier.ApprovalURL("https://cs.example.com/", "a/b"); got != "https://cs.example.com/approvals/a%2Fb" {
		t.Errorf("ApprovalURL = %q", got)
	}
	if got := notifier.ApprovalURL("", "x"); got != "" {
		t.Errorf("ApprovalURL without base = %q", got)
	}
}

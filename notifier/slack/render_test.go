package slack_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// hugeArgs are arguments of about n bytes: one string value of s repeated.
func hugeArgs(t testing.TB, s string, n int) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"body": strings.Repeat(s, n/len(s)), "to": "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func actionIDs(m slacktest.Message) []string {
	var ids []string
	for _, b := range m.Buttons() {
		ids = append(ids, b.ActionID)
	}
	return ids
}

// TestEveryRenderingIsAcceptedBySlack posts every kind of request message,
// including hostile ones, through Channel.Notify to the strict fake, and
// checks Slack would have accepted each, with the buttons its decisions
// allow.
func TestEveryRenderingIsAcceptedBySlack(t *testing.T) {
	withArgs := func(args json.RawMessage) func(*contracts.ApprovalRequested) {
		return func(r *contracts.ApprovalRequested) {
			r.ToolCall.Arguments, r.ToolCall.ArgumentsSHA256 = args, ""
		}
	}
	decisions := func(d ...string) func(*contracts.ApprovalRequested) {
		return func(r *contracts.ApprovalRequested) { r.AllowedDecisions = d }
	}
	risk := func(level string) func(*contracts.ApprovalRequested) {
		return func(r *contracts.ApprovalRequested) { r.Risk = level }
	}
	all := []string{slack.ActionApprove, slack.ActionReject, slack.ActionEdit, slack.ActionRespond, slack.ActionApproveRun, slack.ActionOpen}
	tests := []struct {
		name    string
		req     contracts.ApprovalRequested
		buttons []string
	}{
		{"low risk", toolRequest(t, risk(contracts.RiskLow)),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"high risk", toolRequest(t, risk(contracts.RiskHigh)),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"critical risk, every decision", toolRequest(t, risk(contracts.RiskCritical),
			decisions("approve", "reject", "edit", "respond")), all},
		{"edit allowed", toolRequest(t, decisions("approve", "reject", "edit")),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionEdit, slack.ActionApproveRun, slack.ActionOpen}},
		{"respond allowed", toolRequest(t, decisions("approve", "reject", "respond")),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionRespond, slack.ActionApproveRun, slack.ActionOpen}},
		{"empty allowed decisions", toolRequest(t, decisions()),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"reject only", toolRequest(t, decisions("reject")),
			[]string{slack.ActionReject, slack.ActionOpen}},
		{"human input", questionRequest(),
			[]string{slack.ActionAnswer, slack.ActionDecline, slack.ActionOpen}},
		{"human input with a schema", questionRequest(func(r *contracts.ApprovalRequested) {
			r.Question.Schema = json.RawMessage(`{"type":"object","properties":{"region":{"type":"string"}}}`)
		}), []string{slack.ActionAnswer, slack.ActionDecline, slack.ActionOpen}},
		{"100 KB ASCII argument", toolRequest(t, withArgs(hugeArgs(t, "a", 100<<10))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"100 KB of two-byte runes", toolRequest(t, withArgs(hugeArgs(t, "é", 100<<10))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"100 KB of three-byte runes", toolRequest(t, withArgs(hugeArgs(t, "支", 100<<10))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"100 KB of four-byte runes", toolRequest(t, withArgs(hugeArgs(t, "😀", 100<<10))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"100 KB of characters to escape", toolRequest(t, withArgs(hugeArgs(t, "<&>", 100<<10))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"fences in values", toolRequest(t, withArgs(json.RawMessage("{\"sql\":\"```\\nDROP TABLE users;\\n````\",\"md\":\"a`````b\"}"))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"invalid JSON arguments", toolRequest(t, withArgs(json.RawMessage(`{not json <!channel>`))),
			[]string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"hostile summary and names", toolRequest(t, func(r *contracts.ApprovalRequested) {
			r.Summary = "<script>alert(1)</script> <!channel> <@U0ADMIN> <https://evil.example|click> & more"
			r.Run.Agent = "<!here>" + strings.Repeat("agent", 1000)
			r.ToolCall.Name = strings.Repeat("very_long_tool_name_", 20)
			r.Policy.Rule = "<#C0SECRET>"
			r.Policy.Error = strings.Repeat("&", 5000)
		}), []string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"huge summary of entities", toolRequest(t, func(r *contracts.ApprovalRequested) {
			r.Summary = strings.Repeat("&<>", 20000)
		}), []string{slack.ActionApprove, slack.ActionReject, slack.ActionApproveRun, slack.ActionOpen}},
		{"huge question", questionRequest(func(r *contracts.ApprovalRequested) {
			r.Question.Text = strings.Repeat("Which one?```😀 ", 10000)
		}), []string{slack.ActionAnswer, slack.ActionDecline, slack.ActionOpen}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake(t)
			m := notify(t, fake, newChannel(t, fake), tt.req)
			noRefusals(t, fake)
			if got := actionIDs(m); !slices.Equal(got, tt.buttons) {
				t.Errorf("buttons = %v, want %v", got, tt.buttons)
			}
			for _, s := range m.Texts() {
				if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
					t.Errorf("a text is not clean UTF-8: %.80q", s)
				}
				if len(s) > 3000 {
					t.Errorf("a text of %d bytes", len(s))
				}
			}
			for _, b := range m.Buttons() {
				if b.ActionID == slack.ActionOpen {
					if want := notifier.ApprovalURL(publicURL, eventID); b.URL != want {
						t.Errorf("Open URL = %q, want %q", b.URL, want)
					}
					continue
				}
				v, err := slack.ParseButtonValue(b.Value)
				if err != nil || v.EventID != eventID {
					t.Errorf("button %s value %q: %+v, %v", b.ActionID, b.Value, v, err)
				}
				wantHash := ""
				if tt.req.Kind == contracts.KindToolApproval {
					wantHash = tt.req.ToolCall.ArgumentsSHA256
				}
				if v.ArgumentsSHA256 != wantHash {
					t.Errorf("button %s hash = %q, want %q", b.ActionID, v.ArgumentsSHA256, wantHash)
				}
			}
			if m.Text == "" || len(m.Text) > 3000 {
				t.Errorf("fallback text of %d bytes", len(m.Text))
			}
		})
	}
}

func TestApproveConfirmsOnHighRisk(t *testing.T) {
	for _, tt := range []struct {
		risk, style string
	}{
		{contracts.RiskLow, ""},
		{contracts.RiskMedium, ""},
		{contracts.RiskHigh, "primary"},
		{contracts.RiskCritical, "danger"},
	} {
		msg := slack.RequestMessage(ptr(toolRequest(t, func(r *contracts.ApprovalRequested) { r.Risk = tt.risk })), nil, slack.RenderOptions{})
		fake := newFake(t)
		m := notify(t, fake, newChannel(t, fake), toolRequest(t, func(r *contracts.ApprovalRequested) { r.Risk = tt.risk }))
		noRefusals(t, fake)
		var approve slacktest.Button
		for _, b := range m.Buttons() {
			if b.ActionID == slack.ActionApprove {
				approve = b
			}
		}
		if approve.Style != "primary" {
			t.Errorf("%s: Approve style = %q, want primary", tt.risk, approve.Style)
		}
		if (approve.Confirm != nil) != (tt.style != "") {
			t.Errorf("%s: Approve confirm = %s, want one: %v", tt.risk, approve.Confirm, tt.style != "")
			continue
		}
		if tt.style != "" {
			var c struct {
				Title, Text, Confirm, Deny struct{ Type, Text string }
				Style                      string
			}
			if err := json.Unmarshal(approve.Confirm, &c); err != nil {
				t.Fatal(err)
			}
			if c.Style != tt.style || c.Title.Text == "" || !strings.Contains(c.Text.Text, tt.risk) || c.Confirm.Text != "Approve" {
				t.Errorf("%s: confirm = %+v", tt.risk, c)
			}
		}
		if len(msg.Blocks) == 0 {
			t.Error("RequestMessage rendered no blocks")
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestRenderingEscapes checks that nothing from a request is read by Slack
// as markup: mentions, links, HTML-ish text and ampersands appear as
// entities, and a fence in an argument cannot end the code block.
func TestRenderingEscapes(t *testing.T) {
	fake := newFake(t)
	req := toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.Summary = "<script>alert(1)</script> <!channel> <@U0ADMIN> & <https://evil.example|click>"
		r.Run.Agent = "<!here>"
		r.ToolCall.Arguments = json.RawMessage(`{"note":"` + "```" + ` <!everyone> & done"}`)
		r.ToolCall.ArgumentsSHA256 = ""
	})
	m := notify(t, fake, newChannel(t, fake), req)
	noRefusals(t, fake)
	all := joined(m.Texts()) + "\n" + m.Text
	for _, raw := range []string{"<script>", "<!channel>", "<!here>", "<!everyone>", "<@U0ADMIN>", "<https://evil", " & "} {
		if strings.Contains(all, raw) {
			t.Errorf("the message contains %q unescaped", raw)
		}
	}
	for _, escaped := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt; &lt;!channel&gt; &lt;@U0ADMIN&gt; &amp; &lt;https://evil.example|click&gt;",
		"&lt;!here&gt;",
		"&lt;!everyone&gt; &amp; done",
	} {
		if !strings.Contains(all, escaped) {
			t.Errorf("the message lacks %q", escaped)
		}
	}
	var args string
	for _, s := range m.Texts() {
		if strings.HasPrefix(s, "*Arguments*") {
			args = s
		}
	}
	if n := strings.Count(args, "```"); n != 2 {
		t.Errorf("the arguments section has %d fences, want the 2 of its own code block:\n%s", n, args)
	}
	// The date is the one markup Countersign means.
	if !strings.Contains(all, fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", req.ExpiresAt.Unix(), "2026-11-22T11:00:00Z")) {
		t.Errorf("no expiry date token in %s", all)
	}
}

// TestRenderingCuts checks huge values are cut within Slack's limits, at a
// rune boundary, never inside an entity, saying how much was left out.
func TestRenderingCuts(t *testing.T) {
	req := toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.ToolCall.Arguments = hugeArgs(t, "😀", 100<<10)
		r.ToolCall.ArgumentsSHA256 = ""
		r.Summary = strings.Repeat("&", 10000)
		r.ToolCall.Name = strings.Repeat("é", 200)
	})
	msg := slack.RequestMessage(&req, nil, slack.RenderOptions{})
	fake := newFake(t)
	m := notify(t, fake, newChannel(t, fake), req)
	noRefusals(t, fake)
	texts := m.Texts()
	if len(texts[0]) > 150 || !strings.HasSuffix(texts[0], "…") {
		t.Errorf("header of %d bytes: %q", len(texts[0]), texts[0])
	}
	for _, s := range texts {
		switch {
		case strings.HasPrefix(s, "&amp;"):
			if len(s) > 3000 || !strings.HasSuffix(s, "&amp;…") {
				t.Errorf("summary of %d bytes ends %q", len(s), s[max(0, len(s)-12):])
			}
		case strings.HasPrefix(s, "*Arguments*"):
			if len(s) > 3000 || !strings.Contains(s, "more bytes)") || !strings.HasSuffix(s, "\n```") {
				t.Errorf("arguments of %d bytes end %q", len(s), s[max(0, len(s)-40):])
			}
		}
	}
	if len(msg.Blocks) != len(m.BlockTypes()) {
		t.Errorf("RequestMessage has %d blocks, the posted message %d", len(msg.Blocks), len(m.BlockTypes()))
	}
}

// TestReminderHeader checks a reminder is marked as one.
func TestReminderHeader(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	req := toolRequest(t)
	rc, err := ch.Notify(t.Context(), notifier.Reminder(req, target, 1))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := fake.Message(rc.Ref)
	if got := m.Texts()[0]; got != "Reminder: Approval needed: send_payment" {
		t.Errorf("header = %q", got)
	}
	noRefusals(t, fake)
}

// TestProgressAndEditedArguments renders a pending record after one of two
// approvals and an edit: the progress, the edited arguments and their hash.
func TestProgressAndEditedArguments(t *testing.T) {
	req := toolRequest(t, func(r *contracts.ApprovalRequested) { r.Quorum.Required = 2 })
	edited := json.RawMessage(`{"amount":200,"currency":"EUR","to":"acme"}`)
	rec := pending(req)
	rec.Votes = []contracts.Vote{{Decision: contracts.DecisionEdit, Approver: contracts.Approver{ID: "alice", Via: "web"}, Arguments: edited}}
	before := slack.RequestMessage(&req, nil, slack.RenderOptions{})
	after := slack.RequestMessage(&req, rec, slack.RenderOptions{})
	raw, _ := json.Marshal(after.Blocks)
	s := string(raw)
	for _, want := range []string{"1 of 2 approvals", "edited by alice", `\"amount\": 200`} {
		if !strings.Contains(s, want) {
			t.Errorf("the message lacks %q: %s", want, s)
		}
	}
	var value string
	for _, b := range after.Blocks {
		if a, ok := b.(interface{ ID() string }); ok && strings.HasSuffix(a.ID(), "-actions") {
			data, _ := json.Marshal(b)
			value = string(data)
		}
	}
	if !strings.Contains(value, sha(t, edited)) {
		t.Errorf("buttons do not carry the edited arguments' hash: %s", value)
	}
	// A new iteration has new block ids.
	for i := range before.Blocks {
		for j := range after.Blocks {
			if before.Blocks[i].ID() == after.Blocks[j].ID() {
				t.Errorf("block id %s kept across iterations", before.Blocks[i].ID())
			}
		}
	}
}

package slack_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
)

func approved(req contracts.ApprovalRequested, by string) contracts.Record {
	rec := *pending(req)
	rec.Status = contracts.StatusApproved
	rec.Votes = []contracts.Vote{{Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: by, Via: contracts.ViaSlack}}}
	rec.Outcome = &contracts.Outcome{Decision: contracts.DecisionApprove, DecidedBy: []string{by}, DecidedAt: t0}
	return rec
}

// TestNotifyResolvesTheAddress: a conversation id, a #name and a user id
// (a direct message) each reach their conversation, with the buttons.
func TestNotifyResolvesTheAddress(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	for _, tt := range []struct{ address, channel string }{
		{channelID, channelID},
		{"#" + channelName, channelID},
		{slackAlice, "D0ALICE001"},
	} {
		n := notifier.Requested(toolRequest(t), notifier.Target{Channel: "slack", Address: tt.address})
		rc, err := ch.Notify(t.Context(), n)
		if err != nil {
			t.Fatalf("Notify(%s): %v", tt.address, err)
		}
		c, ts, ok := slack.ParseRef(rc.Ref)
		if !ok || c != tt.channel || ts == "" {
			t.Errorf("Notify(%s): Ref = %q, want %s/<ts>", tt.address, rc.Ref, tt.channel)
		}
		m, ok := fake.Message(rc.Ref)
		if !ok || !m.HasActions() {
			t.Errorf("stored message %+v", m)
		}
	}
	for _, c := range fake.CallsOf("chat.postMessage") {
		if len(c.Warnings) > 0 {
			t.Errorf("Slack would warn: %v", c.Warnings)
		}
	}
	noRefusals(t, fake)
}

func TestUpdateReplacesTheMessage(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	req := toolRequest(t)
	rc, err := ch.Notify(t.Context(), notifier.Requested(req, target))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := fake.Message(rc.Ref)

	up, err := ch.Update(t.Context(), notifier.Decided(approved(req, "alice"), target, rc.Ref))
	if err != nil {
		t.Fatalf("Update: %v (refused %v)", err, fake.Refused())
	}
	if up.Ref != rc.Ref {
		t.Errorf("Update receipt %+v, want Ref %s", up, rc.Ref)
	}
	msgs := fake.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want the one replaced", len(msgs))
	}
	after := msgs[0]
	if after.Versions != 2 || after.HasActions() || len(after.Buttons()) != 0 {
		t.Errorf("after Update: versions %d, actions %v, buttons %v", after.Versions, after.HasActions(), after.Buttons())
	}
	all := joined(after.Texts())
	if !strings.Contains(all, "✅ Approved by alice via slack, 1 of 1") || !strings.Contains(all, "send_payment") {
		t.Errorf("outcome texts: %s", all)
	}
	if !strings.Contains(all, "<"+notifier.ApprovalURL(publicURL, eventID)+"|Open in Countersign>") {
		t.Errorf("no link to the approval as mrkdwn: %s", all)
	}
	if before.Text == after.Text {
		t.Error("the fallback text did not change")
	}
	noRefusals(t, fake)
}

func TestUpdateWithoutRefPostsNew(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	req := toolRequest(t)
	if _, err := ch.Notify(t.Context(), notifier.Requested(req, target)); err != nil {
		t.Fatal(err)
	}
	rec := *pending(req)
	rec.Status = contracts.StatusExpired
	up, err := ch.Update(t.Context(), notifier.Decided(rec, target, ""))
	if err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages()
	if len(msgs) != 2 || msgs[1].Ref() != up.Ref || msgs[0].Versions != 1 {
		t.Fatalf("messages %+v, receipt %+v", msgs, up)
	}
	if got := msgs[1].Texts()[0]; got != "⌛ Expired: send_payment" {
		t.Errorf("header %q", got)
	}
	noRefusals(t, fake)
}

// TestUpdateOfAGoneMessagePostsNew: a ref whose message Slack no longer has
// falls back to a new message.
func TestUpdateOfAGoneMessagePostsNew(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	rec := approved(toolRequest(t), "bob")
	rec.Status, rec.Outcome.Decision, rec.Outcome.Comment = contracts.StatusRejected, contracts.DecisionReject, "too much"
	up, err := ch.Update(t.Context(), notifier.Decided(rec, target, channelID+"/1767225600.000001"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages()
	if len(msgs) != 1 || msgs[0].Ref() != up.Ref || !strings.Contains(joined(msgs[0].Texts()), "❌ Rejected by bob via slack: too much") {
		t.Fatalf("messages %+v", msgs)
	}
	refused := fake.Refused()
	if len(refused) != 1 || refused[0].Error != "message_not_found" {
		t.Errorf("refused %v, want the one chat.update of the gone message", refused)
	}
}

// TestNotifyErrors: how Slack's answers are classified (the suite checks
// the rest of a failure).
func TestNotifyErrors(t *testing.T) {
	tests := []struct {
		name       string
		token      string
		address    string
		fail       func(*testing.T, *slackFake)
		permanent  bool
		retryAfter time.Duration // 0: none asked
	}{
		{name: "bad token", token: "xoxb-wrong", address: channelID, permanent: true},
		{name: "unknown #name", address: "#nowhere", permanent: true},
		{name: "HTTP 429", address: channelID, retryAfter: 7 * time.Second,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", http.StatusTooManyRequests, "", "7") }},
		{name: "ratelimited", address: channelID, retryAfter: 3 * time.Second,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", 0, "ratelimited", "3") }},
		{name: "HTTP 503", address: channelID,
			fail: func(t *testing.T, f *slackFake) {
				f.FailNext("chat.postMessage", http.StatusServiceUnavailable, "", "")
			}},
		{name: "internal_error", address: channelID,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", 0, "internal_error", "") }},
		{name: "token_revoked", address: channelID, permanent: true,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", 0, "token_revoked", "") }},
		{name: "is_archived", address: channelID, permanent: true,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", 0, "is_archived", "") }},
		{name: "not_in_channel", address: channelID, permanent: true,
			fail: func(t *testing.T, f *slackFake) { f.FailNext("chat.postMessage", 0, "not_in_channel", "") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake(t)
			ch := newChannel(t, fake, func(c *slack.Config) {
				if tt.token != "" {
					c.BotToken = tt.token
				}
			})
			if tt.fail != nil {
				tt.fail(t, fake)
			}
			n := notifier.Requested(toolRequest(t), notifier.Target{Channel: "slack", Address: tt.address})
			rc, err := ch.Notify(t.Context(), n)
			if err == nil {
				t.Fatal("Notify succeeded")
			}
			if got := errors.Is(err, notifier.ErrPermanent); got != tt.permanent {
				t.Errorf("permanent = %v, want %v (%v)", got, tt.permanent, err)
			}
			d, ok := notifier.RetryAfterOf(err)
			if ok != (tt.retryAfter != 0) || d != tt.retryAfter {
				t.Errorf("RetryAfterOf = %v, %v; want %v", d, ok, tt.retryAfter)
			}
			if rc.Status != notifier.ReceiptFailed || rc.Permanent != tt.permanent || rc.Error == "" {
				t.Errorf("receipt %+v", rc)
			}
			for _, s := range []string{botToken, "xoxb-wrong"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error shows the token: %v", err)
				}
			}
			if len(fake.Messages()) != 0 {
				t.Error("a message was stored")
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	for _, tt := range []struct {
		cfg  slack.Config
		want string
	}{
		{slack.Config{}, "BotToken"},
		{slack.Config{BotToken: "x", APIURL: "slack.com/api"}, "APIURL"},
		{slack.Config{BotToken: "x", PublicURL: "countersign"}, "PublicURL"},
	} {
		if _, err := slack.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	if _, err := slack.New(slack.Config{BotToken: "x"}); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

func TestReminderGoesInTheThreadOfTheRequest(t *testing.T) {
	fake := newFake(t)
	ch := newChannel(t, fake)
	req := toolRequest(t)
	rc, err := ch.Notify(t.Context(), notifier.Requested(req, target))
	if err != nil {
		t.Fatal(err)
	}
	rem := notifier.Reminder(req, target, 1)
	rem.Ref, rem.Record = rc.Ref, pending(req)
	rr, err := ch.Notify(t.Context(), rem)
	if err != nil {
		t.Fatalf("reminder: %v (refused %v)", err, fake.Refused())
	}
	noRefusals(t, fake)
	if rr.Ref == rc.Ref || rr.Kind != notifier.KindReminder(1) {
		t.Fatalf("reminder receipt %+v", rr)
	}
	posts := fake.CallsOf("chat.postMessage")
	var args struct {
		Channel        string `json:"channel"`
		ThreadTS       string `json:"thread_ts"`
		ReplyBroadcast bool   `json:"reply_broadcast"`
	}
	if err := json.Unmarshal(posts[len(posts)-1].Body, &args); err != nil {
		t.Fatal(err)
	}
	channel, ts, _ := slack.ParseRef(rc.Ref)
	if args.Channel != channel || args.ThreadTS != ts || !args.ReplyBroadcast {
		t.Errorf("reminder posted as %+v, want a broadcast reply in the thread %s/%s", args, channel, ts)
	}
	msg, ok := fake.Message(rr.Ref)
	if !ok || msg.HasActions() || !strings.Contains(joined(msg.Texts()), "0 of 1 approval") {
		t.Errorf("reminder message %+v: want no buttons and the progress", msg)
	}
	// Without the request's message, a reminder is a full message with buttons.
	alone := notifier.Reminder(req, target, 2)
	ra, err := ch.Notify(t.Context(), alone)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := fake.Message(ra.Ref); !m.HasActions() || !strings.Contains(joined(m.Texts()), "Reminder:") {
		t.Errorf("stand-alone reminder: %v", m.Texts())
	}
}

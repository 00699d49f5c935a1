package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
	"github.com/countersign/countersign/services/api"
)

// TestSlackApproveAllOfRun clicks "Approve all of this run" in the strict
// Slack fake on the message of one of a run's three pending calls, one of
// which the clicker requested: through the API's resolver and the real
// arbiter, two count and the third is refused (self_approval); the message
// lists each result; a retried click (the same signed body, as Slack
// retries) publishes nothing new and shows the same.
func TestSlackApproveAllOfRun(t *testing.T) {
	const (
		botToken   = "xoxb-countersign-api-test"
		secret     = "api-test-signing-secret-0123456789"
		channelID  = "C0PAYMENTS1"
		aliceSlack = "U0ALICE0001"
	)
	e := setup(t)
	reg := prometheus.NewRegistry()
	cfg := e.cfg
	cfg.Registerer, cfg.Gatherer = reg, reg
	srv, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	run := contracts.Run{ID: "run-slack", Agent: "billing-bot"}
	var ids []string
	for _, r := range e.review(t, "", run,
		toolCall{ID: "c0", Name: "payments.send", Arguments: json.RawMessage(`{"amount":10}`)},
		toolCall{ID: "c1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":20}`)}) {
		ids = append(ids, r.EventID)
	}
	mine := run
	mine.RequestedBy = "alice"
	self := e.review(t, "", mine, toolCall{ID: "c2", Name: "payments.refund", Arguments: json.RawMessage(`{"amount":30}`)})[0].EventID
	ids = append(ids, self)
	other := e.pendingApproval(t, "run-other", "payments.send")

	record := func(id string) contracts.Record {
		t.Helper()
		var rec recordAnswer
		e.call(t, "GET", "/v1/approvals/"+id, "admin", nil).decode(t, &rec)
		return rec.Record
	}

	fake := slacktest.New(t, botToken)
	fake.AddChannel(channelID, "payments")
	ch, err := slack.New(slack.Config{BotToken: botToken, APIURL: fake.URL(), HTTPClient: fake.Client(), PublicURL: "https://countersign.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	first := record(ids[0])
	rc, err := ch.Notify(t.Context(), notifier.Requested(first.Request, notifier.Target{Channel: contracts.ChannelSlack, Address: channelID}))
	if err != nil {
		t.Fatalf("Notify: %v (refused %v)", err, fake.Refused())
	}
	msg, _ := fake.Message(rc.Ref)
	h, err := slack.NewInteractions(slack.InteractionsConfig{
		SigningSecret: secret, BotToken: botToken, APIURL: fake.URL(), HTTPClient: fake.Client(),
		Resolver: srv.Resolver(), PublicURL: "https://countersign.example.com",
		Users: func(id string) (string, bool) { return "alice", id == aliceSlack },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Wait)

	click := fake.Click(secret, msg, slack.ActionApproveRun, aliceSlack, time.Now())
	body, err := io.ReadAll(click.Body)
	if err != nil {
		t.Fatal(err)
	}
	// serve delivers the click, byte for byte, as Slack does on each try.
	serve := func(try int) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, slacktest.InteractionsURL, bytes.NewReader(body))
		r.Header = click.Header.Clone()
		if try > 0 {
			r.Header.Set("X-Slack-Retry-Num", "1")
			r.Header.Set("X-Slack-Retry-Reason", "http_timeout")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("try %d: HTTP %d %s", try, w.Code, w.Body)
		}
		h.Wait()
	}
	refusal := contracts.Reason(contracts.ReasonSelfApproval).Message()
	for try := range 2 {
		serve(try)
		m, _ := fake.Message(msg.Ref())
		text := strings.Join(m.Texts(), "\n")
		if !strings.Contains(text, "alice approved all of run run-slack:* 2 counted, 1 refused, 0 in flight") {
			t.Fatalf("try %d: the message does not sum up the run: %q", try, text)
		}
		for _, id := range ids {
			want := "(approval " + id + "): counted, approved"
			if id == self {
				want = "(approval " + id + "): refused, " + refusal
			}
			if !strings.Contains(text, want) {
				t.Errorf("try %d: the message lacks %q:\n%s", try, want, text)
			}
		}
		if strings.Contains(text, other) {
			t.Errorf("try %d: another run's approval is listed", try)
		}
		// The clicked message's own call is approved: its buttons are gone.
		if m.HasActions() || !strings.Contains(text, "Approved by alice via slack") {
			t.Errorf("try %d: the clicked message: actions %v, %q", try, m.HasActions(), text)
		}
	}
	if bad := fake.Refused(); len(bad) != 0 {
		t.Errorf("the fake refused %v", bad)
	}
	if n := len(fake.CallsOf("chat.update")); n != 2 {
		t.Errorf("%d chat.update calls, want one per try", n)
	}

	for _, id := range ids {
		if n := e.votesSent(t, id); n != 1 {
			t.Errorf("%d votes sent for %s, want 1 after a retried click", n, id)
		}
		rec := record(id)
		var v struct{ approver contracts.Approver }
		if id == self {
			if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || len(rec.RefusedVotes) != 1 || rec.RefusedVotes[0].Reason != contracts.ReasonSelfApproval {
				t.Fatalf("the self-requested approval: %s, votes %+v, refused %+v", rec.Status, rec.Votes, rec.RefusedVotes)
			}
			v.approver = rec.RefusedVotes[0].Approver
		} else {
			if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 {
				t.Fatalf("approval %s: %s, votes %+v", id, rec.Status, rec.Votes)
			}
			v.approver = rec.Votes[0].Approver
		}
		if v.approver != (contracts.Approver{ID: "alice", Via: contracts.ViaSlack}) {
			t.Errorf("approval %s: voted by %+v, want alice via slack", id, v.approver)
		}
	}
	if rec := record(other); rec.Status != contracts.StatusPending || len(rec.Votes)+len(rec.RefusedVotes) != 0 {
		t.Errorf("another run's approval was voted on: %+v", rec)
	}
}

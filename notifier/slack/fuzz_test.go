package slack_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// onlyHost lets a client reach one host and no other, so fuzzed response
// URLs stay inside the test.
type onlyHost struct {
	host string
	next http.RoundTripper
}

func (o onlyHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != o.host {
		return nil, errors.New("fuzz: host not allowed")
	}
	return o.next.RoundTrip(r)
}

// FuzzInteractions serves signed requests with arbitrary payloads, seeded
// with the payloads Slack sends for every Countersign button and modal: the
// handler must answer 200 or 400, never panic, and refuse (400) every
// payload that repeats a key.
func FuzzInteractions(f *testing.F) {
	fake := slacktest.New(f, botToken)
	fake.AddChannel(channelID, channelName)
	req := toolRequest(f, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "edit", "respond"}
	})
	ch, err := slack.New(slack.Config{BotToken: botToken, APIURL: fake.URL(), PublicURL: publicURL, HTTPClient: fake.Client(), Now: clock})
	if err != nil {
		f.Fatal(err)
	}
	rc, err := ch.Notify(f.Context(), notifier.Requested(req, target))
	if err != nil {
		f.Fatal(err)
	}
	msg, _ := fake.Message(rc.Ref)
	for _, action := range []string{slack.ActionApprove, slack.ActionReject, slack.ActionEdit, slack.ActionRespond, slack.ActionOpen} {
		form, err := url.ParseQuery(readBody(fake.Click(signingSecret, msg, action, slackAlice, t0)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(form.Get("payload"))
	}
	meta := `{\"e\":\"` + eventID + `\",\"h\":\"` + req.ToolCall.ArgumentsSHA256 + `\",\"c\":\"C0PAYMENTS\",\"ts\":\"` + msg.TS + `\"}`
	for _, cb := range []string{slack.ActionEdit, slack.ActionRespond, slack.ActionAnswer} {
		f.Add(`{"type":"view_submission","user":{"id":"U0ALICE001"},"view":{"callback_id":"` + cb + `","private_metadata":"` + meta +
			`","state":{"values":{"countersign_input":{"countersign_input":{"type":"plain_text_input","value":"{\"amount\":1}"}}}}}}`)
	}
	for _, s := range []string{
		"", "null", "[]", "{}", `{"type":null}`, `{"type":"block_actions"}`, `{"type":"block_actions","actions":null}`,
		`{"type":"block_actions","actions":[{}],"user":{"id":"U0ALICE001"}}`,
		`{"type":"block_actions","actions":[{"action_id":"countersign_approve","value":"{\"e\":\"\"}"}],"user":{"id":"U0ALICE001"}}`,
		`{"type":"view_submission","view":{"callback_id":"countersign_edit","private_metadata":"{}"}}`,
		`{"type":"view_submission","view":{"callback_id":"countersign_answer","private_metadata":"{\"e\":1}","state":{"values":{"countersign_input":null}}}}`,
		// Repeated keys, which are refused wherever they are.
		`{"type":"block_actions","user":{"id":"U0ALICE001"},"user":{"id":"U0MALLORY"},"actions":[{"action_id":"countersign_approve","value":"{\"e\":\"` + eventID + `\"}"}]}`,
		`{"type":"block_actions","\u0074ype":"view_submission","user":{"id":"U0ALICE001"}}`,
		`{"type":"block_actions","user":{"id":"U0ALICE001"},"actions":[{"action_id":"countersign_approve","value":"{\"e\":\"` + eventID + `\",\"e\":\"x\"}"}]}`,
	} {
		f.Add(s)
	}

	client := fake.Client()
	u, _ := url.Parse(fake.URL())
	client.Transport = onlyHost{host: u.Host, next: client.Transport}
	h, err := slack.NewInteractions(slack.InteractionsConfig{
		SigningSecret: signingSecret, BotToken: botToken, APIURL: fake.URL(), HTTPClient: client,
		Resolver: newResolver(pending(req)), Users: directory, Now: clock,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, signed("payload="+url.QueryEscape(payload), t0))
		h.Wait()
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("HTTP %d for payload %q", w.Code, payload)
		}
		if errors.Is(contracts.CheckDuplicateKeys([]byte(payload)), contracts.ErrDuplicateKey) && w.Code != http.StatusBadRequest {
			t.Fatalf("HTTP %d for payload %q, which repeats a key", w.Code, payload)
		}
	})
}

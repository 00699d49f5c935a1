package slack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// TestConformance runs the suite every channel passes against the fake
// Slack Web API.
func TestConformance(t *testing.T) {
	notifiertest.TestChannel(t, notifiertest.Harness{New: conformanceSetup, Links: true})
}

func conformanceSetup(t *testing.T, env notifiertest.Env) notifiertest.Setup {
	fake := newFake(t)
	ch := newChannel(t, fake, func(c *slack.Config) {
		c.PublicURL, c.Now, c.Logger = env.PublicURL, env.Now, env.Logger
	})
	return notifiertest.Setup{
		Channel: ch,
		Targets: [2]notifier.Target{
			{Channel: contracts.ChannelSlack, Address: channelID},
			{Channel: contracts.ChannelSlack, Address: slackAlice, Approver: "alice"},
		},
		Unknown:  notifier.Target{Channel: contracts.ChannelSlack, Address: "C0UNKNOWN"},
		Received: func() []notifiertest.Delivery { return slackDeliveries(t, fake) },
		Fail: func(permanent bool) {
			if permanent {
				fake.FailNext("chat.postMessage", 0, "is_archived", "")
			} else {
				fake.FailNext("chat.postMessage", http.StatusServiceUnavailable, "", "")
			}
		},
		Stop:    fake.Close,
		Secrets: []string{botToken},
	}
}

// slackDeliveries are the messages the fake posted or updated, in order. A
// post is a message of its own; an update rewrites the message it names,
// so updates of one message are one.
func slackDeliveries(t *testing.T, fake *slacktest.Server) []notifiertest.Delivery {
	var out []notifiertest.Delivery
	for _, c := range fake.Calls() {
		if c.Ref == "" {
			continue
		}
		var args struct {
			Channel  string          `json:"channel"`
			Text     string          `json:"text"`
			Blocks   json.RawMessage `json:"blocks"`
			ThreadTS string          `json:"thread_ts"`
		}
		if err := json.Unmarshal(c.Body, &args); err != nil {
			t.Fatalf("%s body: %v", c.Method, err)
		}
		m := slacktest.Message{Text: args.Text, Blocks: args.Blocks}
		content := append([]string{m.Text}, m.Texts()...)
		for _, b := range m.Buttons() {
			content = append(content, b.Value, b.URL)
		}
		d := notifiertest.Delivery{To: args.Channel, Key: c.Ref, Thread: c.Ref, Content: strings.Join(content, "\n")}
		if conversation, _, ok := slack.ParseRef(c.Ref); ok && args.ThreadTS != "" {
			d.Thread = slack.Ref(conversation, args.ThreadTS)
		}
		if c.Method == "chat.update" {
			d.Key = "chat.update " + c.Ref
		}
		out = append(out, d)
	}
	return out
}

package slack_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/countersign/countersign/notifier/slack"
)

// ExampleVerify checks the request signed in Slack's documentation, at the
// time it was signed and a day later.
func ExampleVerify() {
	body := []byte("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", "1531420618")
	h.Set("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	signedAt := time.Unix(1531420618, 0)

	fmt.Println(slack.Verify("8f742231b10e8888abcd99yyyzzz85a5", h, body, signedAt))
	fmt.Println(slack.Verify("8f742231b10e8888abcd99yyyzzz85a5", h, body, signedAt.Add(24*time.Hour)))
	// Output:
	// <nil>
	// slack: request timestamp outside the allowed window
}

// ExampleParseRef splits the Ref of a Slack receipt.
func ExampleParseRef() {
	channel, ts, ok := slack.ParseRef(slack.Ref("C0PAYMENTS", "1767225601.000001"))
	fmt.Println(channel, ts, ok)
	// Output: C0PAYMENTS 1767225601.000001 true
}

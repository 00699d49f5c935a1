package slack_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// signedVector is a request signed by Slack, with the signature it carries.
type signedVector struct {
	name, secret, ts, body, signature string
}

var vectors = []signedVector{
	{
		// Slack's documentation, "Verifying requests from Slack".
		name:      "slack docs",
		secret:    "8f742231b10e8888abcd99yyyzzz85a5",
		ts:        "1531420618",
		body:      "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
		signature: "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
	},
	{
		// slack-go's security tests.
		name:      "slack-go",
		secret:    "e6b19c573432dcc6b075501d51b51bb8",
		ts:        "1531431954",
		body:      `{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention","user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec","ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback","event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}`,
		signature: "v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c",
	},
}

func (v signedVector) header() http.Header {
	h := http.Header{}
	h.Set("X-Slack-Signature", v.signature)
	h.Set("X-Slack-Request-Timestamp", v.ts)
	return h
}

func (v signedVector) time(t *testing.T) time.Time {
	t.Helper()
	secs, err := strconv.ParseInt(v.ts, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(secs, 0)
}

func TestVerifyAcceptsSlackVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			now := v.time(t)
			if err := slack.Verify(v.secret, v.header(), []byte(v.body), now); err != nil {
				t.Fatalf("Verify(%s vector) = %v, want nil", v.name, err)
			}
			// At the edges of the window, in both directions.
			for _, d := range []time.Duration{slack.MaxClockSkew, -slack.MaxClockSkew} {
				if err := slack.Verify(v.secret, v.header(), []byte(v.body), now.Add(d)); err != nil {
					t.Errorf("Verify at now%+v = %v, want nil", d, err)
				}
			}
		})
	}
}

// TestSignMatchesSlackVectors checks the fake signs as Slack does, so the
// requests it builds in other tests are realistic.
func TestSignMatchesSlackVectors(t *testing.T) {
	for _, v := range vectors {
		h := slacktest.Sign(v.secret, v.time(t), []byte(v.body))
		if got := h.Get("X-Slack-Signature"); got != v.signature {
			t.Errorf("%s: Sign = %s, want %s", v.name, got, v.signature)
		}
		if got := h.Get("X-Slack-Request-Timestamp"); got != v.ts {
			t.Errorf("%s: timestamp = %s, want %s", v.name, got, v.ts)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	v := vectors[0]
	now := v.time(t)
	body := []byte(v.body)
	with := func(key, value string) http.Header {
		h := v.header()
		if value == "" {
			h.Del(key)
		} else {
			h.Set(key, value)
		}
		return h
	}
	upper := strings.Replace(v.signature, "a2114d", "A2114D", 1)
	tests := []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"tampered body", v.secret, v.header(), []byte(strings.Replace(v.body, "roadrunner", "coyote", 1)), now, slack.ErrBadSignature},
		{"one byte added", v.secret, v.header(), append([]byte(v.body), '&'), now, slack.ErrBadSignature},
		{"wrong secret", "8f742231b10e8888abcd99yyyzzz85a6", v.header(), body, now, slack.ErrBadSignature},
		{"stale: too old", v.secret, v.header(), body, now.Add(slack.MaxClockSkew + time.Second), slack.ErrStaleTimestamp},
		{"stale: from the future", v.secret, v.header(), body, now.Add(-slack.MaxClockSkew - time.Second), slack.ErrStaleTimestamp},
		{"stale: a day old", v.secret, v.header(), body, now.Add(24 * time.Hour), slack.ErrStaleTimestamp},
		{"no signature header", v.secret, with("X-Slack-Signature", ""), body, now, slack.ErrMissingHeaders},
		{"no timestamp header", v.secret, with("X-Slack-Request-Timestamp", ""), body, now, slack.ErrMissingHeaders},
		{"no headers", v.secret, http.Header{}, body, now, slack.ErrMissingHeaders},
		{"bad hex", v.secret, with("X-Slack-Signature", "v0=zz114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"), body, now, slack.ErrBadSignature},
		{"short hex", v.secret, with("X-Slack-Signature", v.signature[:20]), body, now, slack.ErrBadSignature},
		{"no version", v.secret, with("X-Slack-Signature", strings.TrimPrefix(v.signature, "v0=")), body, now, slack.ErrBadSignature},
		{"other version", v.secret, with("X-Slack-Signature", "v1="+strings.TrimPrefix(v.signature, "v0=")), body, now, slack.ErrBadSignature},
		{"timestamp not a number", v.secret, with("X-Slack-Request-Timestamp", "1531420618.5"), body, now, slack.ErrBadSignature},
		{"timestamp changed", v.secret, with("X-Slack-Request-Timestamp", "1531420619"), body, now, slack.ErrBadSignature},
		{"empty secret", "", v.header(), body, now, slack.ErrNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := slack.Verify(tt.secret, tt.h, tt.body, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if strings.Contains(err.Error(), v.secret) {
				t.Errorf("the error %q shows the secret", err)
			}
		})
	}
	// Hex digits are case-insensitive: the signature is the same bytes.
	if err := slack.Verify(v.secret, with("X-Slack-Signature", upper), body, now); err != nil {
		t.Errorf("upper-case hex: %v", err)
	}
}

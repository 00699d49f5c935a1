package slack_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/slack"
)

// A payload that names a key twice is ambiguous: it is refused and casts
// nothing, whichever of its values would have counted.
func TestPayloadWithARepeatedKeyIsRefused(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	form, err := url.ParseQuery(readBody(e.fake.Click(signingSecret, e.current(t), slack.ActionApprove, slackAlice, t0)))
	if err != nil {
		t.Fatal(err)
	}
	p := form.Get("payload")
	if !strings.HasPrefix(p, "{") || !strings.Contains(p, `"user":`) {
		t.Fatalf("click payload %s", p)
	}
	for _, dup := range []string{
		`{"user":{"id":"U0NOBODY"},` + p[1:],  // a second user, first
		`{"\u0074ype":"view_closed",` + p[1:], // a second type, escaped
	} {
		w := e.serve(signed("payload="+url.QueryEscape(dup), t0))
		e.h.Wait()
		if w.Code != http.StatusBadRequest {
			t.Errorf("HTTP %d for %s", w.Code, dup)
		}
	}
	if len(e.res.Votes()) != 0 || len(e.fake.ResponsePosts()) != 0 {
		t.Fatalf("acted on a refused payload: votes %+v", e.res.Votes())
	}
	// The same click without the repeated key counts.
	if w := e.serve(signed("payload="+url.QueryEscape(p), t0)); w.Code != http.StatusOK {
		t.Fatalf("HTTP %d for the click", w.Code)
	}
	e.h.Wait()
	if v := e.res.Votes(); len(v) != 1 || v[0].Decision != contracts.DecisionApprove {
		t.Fatalf("votes %+v", v)
	}
}

func TestEditWithARepeatedKeyIsRefused(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "edit"}
	}))
	v := e.openModal(t, slack.ActionEdit)
	got := decodeView(t, e.submit(t, v, slackAlice, `{"amount": 1, "currency": "EUR", "amount": 5000}`))
	if got.ResponseAction != "errors" || !strings.Contains(got.Errors[slack.InputBlockID], `"amount" appears twice`) {
		t.Errorf("%+v, want the repeated key named on the input", got)
	}
	if len(e.res.Votes()) != 0 {
		t.Errorf("votes %+v", e.res.Votes())
	}
}

func TestButtonValueWithARepeatedKey(t *testing.T) {
	if _, err := slack.ParseButtonValue(`{"e":"` + eventID + `","h":"a","e":"other"}`); err == nil {
		t.Fatal("a button value with two event ids was read")
	}
}

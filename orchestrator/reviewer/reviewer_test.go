package reviewer_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/orchestrator/reviewer"
)

func record(t *testing.T) *contracts.Record {
	t.Helper()
	args := `{"card":"4242424242424242","items":[{"token":"tok_secret"}],"amount":12}`
	sum, err := contracts.ArgumentsSHA256([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return &contracts.Record{
		Request: contracts.ApprovalRequested{
			EventID: "312783e4-11a0-5e21-b755-806afd756c7e", Kind: contracts.KindToolApproval,
			Run:      contracts.Run{Agent: "billing", Tenant: "acme", RequestedBy: "erin", Owner: "frank"},
			ToolCall: &contracts.ToolCall{Name: "stripe.charge", Arguments: json.RawMessage(args), ArgumentsSHA256: sum},
			Risk:     contracts.RiskMedium, Summary: "charge 12", Policy: contracts.PolicyRef{Rule: "charges", Version: "v1"},
			Sensitive: []string{"/card"},
		},
		// An edit masked a value of its own: the record's union is sent.
		Sensitive: []string{"/items/0/token"},
	}
}

// TestInputIsMaskedAsNotificationsAre: a reviewer gets the arguments with
// every value the record masks replaced by the mask, no hash, no people.
func TestInputIsMaskedAsNotificationsAre(t *testing.T) {
	rec := record(t)
	data, err := json.Marshal(reviewer.InputFor(rec))
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	for _, leak := range []string{"4242424242424242", "tok_secret", rec.Request.ToolCall.ArgumentsSHA256, "erin", "frank"} {
		if strings.Contains(got, leak) {
			t.Fatalf("the input holds %q: %s", leak, got)
		}
	}
	want := `{"spec":"countersign.review.input/v1","event_id":"312783e4-11a0-5e21-b755-806afd756c7e","tool":"stripe.charge",` +
		`"arguments":{"amount":12,"card":"` + approval.Mask + `","items":[{"token":"` + approval.Mask + `"}]},` +
		`"masked":["/card","/items/0/token"],"summary":"charge 12","risk":"medium","agent":"billing","tenant":"acme","rule":"charges"}`
	if got != want {
		t.Fatalf("input\n got %s\nwant %s", got, want)
	}
}

// TestHTTPReviewer: a KindHTTP reviewer is posted the input as the body
// and its {score, explanation} read; anything else is an *Error with its
// reason, and a redirect is not followed.
func TestHTTPReviewer(t *testing.T) {
	var answer string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in reviewer.Input
		if r.Method != http.MethodPost || r.URL.Path != "/review" || r.Header.Get("Authorization") != "Bearer k" ||
			json.Unmarshal(body, &in) != nil || in.Spec != reviewer.SpecInput || in.Tool != "stripe.charge" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		if status == http.StatusFound {
			http.Redirect(w, r, "https://elsewhere.example/", status)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	ep := &reviewer.Endpoint{Name: "house", Kind: reviewer.KindHTTP, URL: srv.URL + "/review", APIKey: "k"}
	if err := ep.Validate(); err != nil {
		t.Fatal(err)
	}
	in := reviewer.InputFor(record(t))
	for _, c := range []struct {
		answer string
		status int
		score  int
		reason string
	}{
		{`{"score": 12, "explanation": "fine"}`, 200, 12, ""},
		{`{"score": 7.0, "explanation": "fine", "extra": 1}`, 200, 7, ""},
		{`{"score": "12"}`, 200, 0, reviewer.ReasonUnparsable},
		{`{"score": 12.5}`, 200, 0, reviewer.ReasonUnparsable},
		{`{"score": 101}`, 200, 0, reviewer.ReasonUnparsable},
		{`{"explanation": "no score"}`, 200, 0, reviewer.ReasonUnparsable},
		{`not json`, 200, 0, reviewer.ReasonUnparsable},
		{`{"score": 1}`, 503, 0, reviewer.ReasonStatus},
		{``, http.StatusFound, 0, reviewer.ReasonStatus},
	} {
		answer, status = c.answer, c.status
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		a, err := ep.Review(ctx, in, time.Minute)
		cancel()
		var re *reviewer.Error
		switch {
		case c.reason == "" && (err != nil || a.Score != c.score):
			t.Errorf("%s: %+v, %v", c.answer, a, err)
		case c.reason != "" && (!errors.As(err, &re) || re.Reason != c.reason):
			t.Errorf("%s (%d): %v, want a %s error", c.answer, c.status, err, c.reason)
		}
	}
}

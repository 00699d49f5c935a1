// Package reviewer asks an automated first reviewer for its opinion of an
// approval request: a risk score from 0 to 100 and an explanation.
//
// What a reviewer is sent is Input, built from the record by InputFor and
// nothing else: the tool, its arguments with every sensitive value masked
// exactly as notifications mask them (approval.Mask in place of the value),
// the pointers of the masked values, the summary (rendered with the same
// masking), the risk, the agent, the tenant, the rule and the event id. No
// arguments hash (it would confirm a guess of a masked value), no people,
// no tokens, no secrets.
//
// Two kinds of endpoint are spoken to: KindOpenAI, an OpenAI-compatible
// chat completions API (POST <url>/chat/completions with a system prompt
// and the Input as JSON in the user message, response_format json_object;
// the answer is the assistant message's JSON {score, explanation}), and
// KindHTTP, any service that takes the Input as the JSON body of a POST and
// answers {score, explanation}. Anything else — a transport error, a
// timeout, a status outside 2xx, an answer that is not that JSON, a score
// outside 0..100 — is an *Error, and the request is left to people.
package reviewer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// Kinds of reviewer endpoint.
const (
	KindOpenAI = "openai"
	KindHTTP   = "http"
)

// SpecInput is the spec of what a KindHTTP reviewer is sent.
const SpecInput = "countersign.review.input/v1"

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 1 << 20

// Endpoint is one configured reviewer.
type Endpoint struct {
	// Name is the name policies give it (reviewer.endpoint).
	Name string
	// URL is, for KindOpenAI, the API's base URL up to its version
	// ("https://api.openai.com/v1"), to which /chat/completions is added;
	// for KindHTTP the URL posted to. It must hold no secret.
	URL  string
	Kind string
	// Model is the model asked (KindOpenAI; required there).
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer <key>".
	APIKey string
	// Client makes the calls (default: a client that follows no redirect).
	Client *http.Client
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate checks e; its errors name the field.
func (e *Endpoint) Validate() error {
	var errs []error
	if !nameRE.MatchString(e.Name) {
		errs = append(errs, fmt.Errorf("reviewer %q: the name must be 1 to 64 of a-z, 0-9, _ and -", e.Name))
	}
	u, err := url.Parse(e.URL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		errs = append(errs, fmt.Errorf("reviewer %q: url must be an http(s) URL", e.Name))
	case u.User != nil || u.RawQuery != "":
		errs = append(errs, fmt.Errorf("reviewer %q: url must hold no credentials or query (use api_key_env)", e.Name))
	}
	switch e.Kind {
	case KindOpenAI:
		if e.Model == "" {
			errs = append(errs, fmt.Errorf("reviewer %q: model is required for kind openai", e.Name))
		}
	case KindHTTP:
	default:
		errs = append(errs, fmt.Errorf("reviewer %q: kind must be openai or http, not %q", e.Name, e.Kind))
	}
	return errors.Join(errs...)
}

// Input is what a reviewer is sent about one request.
type Input struct {
	Spec    string `json:"spec"`
	EventID string `json:"event_id"`
	Tool    string `json:"tool"`
	// Arguments are the call's, each sensitive value replaced by
	// approval.Mask.
	Arguments json.RawMessage `json:"arguments"`
	// Masked are the RFC 6901 pointers of the masked values.
	Masked  []string `json:"masked,omitempty"`
	Summary string   `json:"summary,omitempty"`
	Risk    string   `json:"risk"`
	Agent   string   `json:"agent"`
	Tenant  string   `json:"tenant,omitempty"`
	Rule    string   `json:"rule"`
}

// InputFor is what rec's reviewer is sent: its request's call as a
// notification about rec shows it (every value the record masks, masked).
func InputFor(rec *contracts.Record) Input {
	req := &rec.Request
	in := Input{
		Spec: SpecInput, EventID: req.EventID, Summary: req.Summary, Risk: req.Risk,
		Agent: req.Run.Agent, Tenant: req.Run.Tenant, Rule: req.Policy.Rule, Arguments: json.RawMessage("{}"),
	}
	if req.ToolCall != nil {
		masked := approval.RecordSensitive(rec)
		in.Tool = req.ToolCall.Name
		in.Arguments = approval.Redact(req.ToolCall.Arguments, masked)
		in.Masked = masked
	}
	return in
}

// Answer is a reviewer's opinion.
type Answer struct {
	Score       int
	Explanation string
}

// Error is why a reviewer gave no opinion. Reason is one of the Reason*
// codes; the message never holds the API key or the answer's body.
type Error struct {
	Reason string
	Msg    string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Msg }

// Reasons a reviewer gave no opinion.
const (
	ReasonTimeout    = "timeout"
	ReasonTransport  = "transport"
	ReasonStatus     = "status"
	ReasonUnparsable = "unparsable"
	// ReasonUnknown: no reviewer of that name is configured.
	ReasonUnknown = "unknown_reviewer"
	// ReasonBusy: every worker was busy and the queue full.
	ReasonBusy = "busy"
)

// defaultClient follows no redirect: a reviewer answers where it is asked.
var defaultClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// scoreOf reads {score, explanation} from data: score a whole number from
// 0 to 100; explanation text, cut to contracts.MaxExplanationBytes.
func scoreOf(data []byte) (Answer, error) {
	var a struct {
		Score       json.RawMessage `json:"score"`
		Explanation string          `json:"explanation"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return Answer{}, &Error{ReasonUnparsable, "the answer is not a JSON object {score, explanation}"}
	}
	if len(a.Score) == 0 || string(a.Score) == "null" {
		return Answer{}, &Error{ReasonUnparsable, "the answer has no score"}
	}
	var f float64
	if err := json.Unmarshal(a.Score, &f); err != nil || f != float64(int(f)) || f < 0 || f > contracts.MaxReviewScore {
		return Answer{}, &Error{ReasonUnparsable, fmt.Sprintf("score %s is not a whole number from 0 to 100", contracts.TruncateText(string(a.Score), 32))}
	}
	expl := a.Explanation
	if !contracts.ValidText(expl) {
		return Answer{}, &Error{ReasonUnparsable, "the explanation holds control characters"}
	}
	return Answer{Score: int(f), Explanation: contracts.TruncateText(expl, contracts.MaxExplanationBytes)}, nil
}

// timeoutError is the error of a call that ran out of time.
func timeoutError(d time.Duration) *Error {
	return &Error{ReasonTimeout, fmt.Sprintf("no answer within %s", d)}
}

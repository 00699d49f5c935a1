package slack_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// interactionEnv is a request shown in the payments channel of the fake,
// a resolver holding its pending record, and the handler.
type interactionEnv struct {
	fake *slacktest.Server
	res  *resolver
	h    *slack.Interactions
	req  contracts.ApprovalRequested
	msg  slacktest.Message
	logs *notifiertest.Logs
}

func newInteractionEnv(t *testing.T, req contracts.ApprovalRequested, change ...func(*slack.InteractionsConfig)) *interactionEnv {
	t.Helper()
	fake := newFake(t)
	e := &interactionEnv{fake: fake, res: newResolver(pending(req)), req: req, logs: &notifiertest.Logs{}}
	e.msg = notify(t, fake, newChannel(t, fake), req)
	cfg := slack.InteractionsConfig{
		SigningSecret: signingSecret, BotToken: botToken, APIURL: fake.URL(), HTTPClient: fake.Client(),
		Resolver: e.res, Users: directory, PublicURL: publicURL, Now: clock, Logger: e.logs.Logger(),
	}
	for _, f := range change {
		f(&cfg)
	}
	h, err := slack.NewInteractions(cfg)
	if err != nil {
		t.Fatalf("NewInteractions: %v", err)
	}
	e.h = h
	t.Cleanup(h.Wait)
	return e
}

func (e *interactionEnv) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// click serves a signed click of userID on the button actionID of the
// request's current message, and waits for the work it started.
func (e *interactionEnv) click(t *testing.T, actionID, userID string) *httptest.ResponseRecorder {
	t.Helper()
	m, ok := e.fake.Message(e.msg.Ref())
	if !ok {
		t.Fatal("the request's message is gone")
	}
	w := e.serve(e.fake.Click(signingSecret, m, actionID, userID, t0))
	e.h.Wait()
	return w
}

func (e *interactionEnv) current(t *testing.T) slacktest.Message {
	t.Helper()
	m, ok := e.fake.Message(e.msg.Ref())
	if !ok {
		t.Fatal("the request's message is gone")
	}
	return m
}

// ephemerals are the texts shown privately through response URLs.
func (e *interactionEnv) ephemerals() []string {
	var out []string
	for _, p := range e.fake.ResponsePosts() {
		if p.Ephemeral() {
			out = append(out, p.Text)
		}
	}
	return out
}

type viewResponse struct {
	ResponseAction string            `json:"response_action"`
	Errors         map[string]string `json:"errors"`
}

func decodeView(t *testing.T, w *httptest.ResponseRecorder) viewResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", w.Code, w.Body)
	}
	var v viewResponse
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("view response %q: %v", w.Body, err)
	}
	return v
}

// openModal clicks actionID and returns the modal views.open showed.
func (e *interactionEnv) openModal(t *testing.T, actionID string) slacktest.View {
	t.Helper()
	w := e.click(t, actionID, slackAlice)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("click on %s: HTTP %d %q", actionID, w.Code, w.Body)
	}
	views := e.fake.Views()
	if len(views) == 0 {
		t.Fatalf("no modal opened (refused: %v, ephemerals: %v)", e.fake.Refused(), e.ephemerals())
	}
	return views[len(views)-1]
}

func (e *interactionEnv) submit(t *testing.T, v slacktest.View, userID, input string) *httptest.ResponseRecorder {
	t.Helper()
	values := map[string]map[string]string{slack.InputBlockID: {slack.InputActionID: input}}
	return e.serve(e.fake.Submit(signingSecret, v, userID, values, t0))
}

// TestClickApproveAnswersBeforeTheVote holds the vote in the resolver until
// the handler has answered, then checks the vote and the replaced message.
func TestClickApproveAnswersBeforeTheVote(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	e.res.set(func(r *resolver) { r.gate, r.entered = gate, entered })

	w := e.serve(e.fake.Click(signingSecret, e.msg, slack.ActionApprove, slackAlice, t0))
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("response HTTP %d %q, want 200 and no body", w.Code, w.Body)
	}
	<-entered // the vote is being cast, and held
	e.res.set(func(r *resolver) {
		if r.returned != 0 {
			t.Error("the vote was answered before the handler answered Slack")
		}
	})
	if len(e.fake.ResponsePosts()) != 0 {
		t.Error("the message changed before the vote was counted")
	}
	close(gate)
	e.h.Wait()

	votes := e.res.Votes()
	if len(votes) != 1 {
		t.Fatalf("%d votes", len(votes))
	}
	v := votes[0]
	id, err := uuid.Parse(v.VoteID)
	if err != nil || id.Version() != 7 {
		t.Errorf("VoteID %q is not a UUIDv7", v.VoteID)
	}
	if v.Spec != contracts.SpecVote || v.EventID != eventID || v.Decision != contracts.DecisionApprove ||
		v.Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaSlack}) ||
		v.ArgumentsSHA256 != e.req.ToolCall.ArgumentsSHA256 || !v.DecidedAt.Equal(t0) || v.Comment != "" {
		t.Errorf("vote %+v", v)
	}
	posts := e.fake.ResponsePosts()
	if len(posts) != 1 || !posts[0].ReplaceOriginal || posts[0].Channel != channelID || posts[0].TS != e.msg.TS {
		t.Fatalf("response posts %+v, want one replace_original of the message", posts)
	}
	m := e.current(t)
	if m.Versions != 2 || m.HasActions() || !strings.Contains(joined(m.Texts()), "✅ Approved by alice via slack, 1 of 1") {
		t.Errorf("message after the vote: versions %d, actions %v, texts %q", m.Versions, m.HasActions(), m.Texts())
	}
	noRefusals(t, e.fake)
}

// TestClicksShowProgress: with a quorum of two, the first approval replaces
// the message with the progress and the buttons, the second with the outcome.
func TestClicksShowProgress(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) { r.Quorum.Required = 2 }))
	if !strings.Contains(joined(e.msg.Texts()), "0 of 2 approvals") {
		t.Errorf("posted without progress: %q", e.msg.Texts())
	}
	e.click(t, slack.ActionApprove, slackAlice)
	m := e.current(t)
	if !strings.Contains(joined(m.Texts()), "1 of 2 approvals") || !m.HasActions() || m.Versions != 2 {
		t.Fatalf("after one approval: %q, actions %v", m.Texts(), m.HasActions())
	}
	e.click(t, slack.ActionApprove, slackBob)
	m = e.current(t)
	if !strings.Contains(joined(m.Texts()), "Approved by alice via slack, bob via slack, 2 of 2") || m.HasActions() {
		t.Errorf("after two approvals: %q", m.Texts())
	}
	noRefusals(t, e.fake)
}

func TestClickRejectAndDecline(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t))
		e.click(t, slack.ActionReject, slackBob)
		v := e.res.Votes()[0]
		if v.Decision != contracts.DecisionReject || v.Comment != "Rejected in Slack" || v.ArgumentsSHA256 != e.req.ToolCall.ArgumentsSHA256 || v.Approver.ID != "bob" {
			t.Errorf("vote %+v", v)
		}
		if texts := joined(e.current(t).Texts()); !strings.Contains(texts, "❌ Rejected by bob via slack: Rejected in Slack") {
			t.Errorf("message %q", texts)
		}
		noRefusals(t, e.fake)
	})
	t.Run("decline", func(t *testing.T) {
		e := newInteractionEnv(t, questionRequest())
		e.click(t, slack.ActionDecline, slackAlice)
		v := e.res.Votes()[0]
		if v.Decision != contracts.DecisionAnswer || v.Answer == nil || v.Answer.Action != contracts.AnswerDecline || v.ArgumentsSHA256 != "" {
			t.Errorf("vote %+v", v)
		}
		if texts := joined(e.current(t).Texts()); !strings.Contains(texts, "❌ Answered by alice via slack (decline)") {
			t.Errorf("message %q", texts)
		}
		noRefusals(t, e.fake)
	})
}

// TestClickResults covers what the clicker alone is told when a vote does
// not count.
func TestClickResults(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*resolver)
		want  string
	}{
		{"refused", func(r *resolver) { r.refuse, r.detail = contracts.ReasonSelfApproval, "dave owns the run" },
			"Your vote was not counted: " + contracts.Reason(contracts.ReasonSelfApproval).Message() + ": dave owns the run."},
		{"stale", func(r *resolver) { r.refuse = contracts.ReasonStaleArguments },
			contracts.Reason(contracts.ReasonStaleArguments).Message()},
		{"in flight", func(r *resolver) { r.inFlight = true }, "Your vote is being counted."},
		{"unknown approval", func(r *resolver) { r.records = map[string]*contracts.Record{} },
			contracts.Reason(contracts.ReasonUnknownEvent).Message()},
		{"resolver down", func(r *resolver) { r.err = errors.New("no responders on the bus") },
			"could not record your vote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newInteractionEnv(t, toolRequest(t))
			e.res.set(tt.setup)
			w := e.click(t, slack.ActionApprove, slackAlice)
			if w.Code != http.StatusOK || w.Body.Len() != 0 {
				t.Errorf("HTTP %d %q", w.Code, w.Body)
			}
			eph := e.ephemerals()
			if len(eph) != 1 || !strings.Contains(eph[0], tt.want) {
				t.Errorf("ephemeral texts %q, want one with %q", eph, tt.want)
			}
			if m := e.current(t); m.Versions != 1 {
				t.Errorf("the message changed (%d versions)", m.Versions)
			}
			if len(e.res.Votes()) != 1 {
				t.Errorf("%d votes cast", len(e.res.Votes()))
			}
			noRefusals(t, e.fake)
		})
	}
}

// TestClickOnADecidedRequest: refused as closed, the clicker learns why and
// the message shows the outcome.
func TestClickOnADecidedRequest(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	e.res.set(func(r *resolver) {
		rec := approved(e.req, "bob")
		r.records[eventID], r.refuse = &rec, contracts.ReasonClosed
	})
	e.click(t, slack.ActionApprove, slackAlice)
	if eph := e.ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], contracts.Reason(contracts.ReasonClosed).Message()) {
		t.Errorf("ephemerals %q", eph)
	}
	if m := e.current(t); m.HasActions() || !strings.Contains(joined(m.Texts()), "Approved by bob") {
		t.Errorf("message %q", m.Texts())
	}
	noRefusals(t, e.fake)
}

func TestClickFromUserNotInDirectory(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	w := e.click(t, slack.ActionApprove, slackMallory)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HTTP %d %q", w.Code, w.Body)
	}
	if votes := e.res.Votes(); len(votes) != 0 {
		t.Errorf("votes %+v", votes)
	}
	posts := e.fake.ResponsePosts()
	if len(posts) != 1 || !posts[0].Ephemeral() || posts[0].ReplaceOriginal || !strings.Contains(posts[0].Text, "not in the Countersign directory") {
		t.Errorf("response posts %+v", posts)
	}
	var raw map[string]any
	if err := json.Unmarshal(posts[0].Body, &raw); err != nil || raw["response_type"] != "ephemeral" || raw["replace_original"] != false {
		t.Errorf("the reply is not an ephemeral that keeps the message: %s", posts[0].Body)
	}
	noRefusals(t, e.fake)
}

func TestClickWithBadSignature(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  func(e *interactionEnv) *http.Request
	}{
		{"wrong secret", func(e *interactionEnv) *http.Request {
			return e.fake.Click("not-the-secret", e.msg, slack.ActionApprove, slackAlice, t0)
		}},
		{"stale timestamp", func(e *interactionEnv) *http.Request {
			return e.fake.Click(signingSecret, e.msg, slack.ActionApprove, slackAlice, t0.Add(-6*time.Minute))
		}},
		{"timestamp from the future", func(e *interactionEnv) *http.Request {
			return e.fake.Click(signingSecret, e.msg, slack.ActionApprove, slackAlice, t0.Add(6*time.Minute))
		}},
		{"no signature", func(e *interactionEnv) *http.Request {
			r := e.fake.Click(signingSecret, e.msg, slack.ActionApprove, slackAlice, t0)
			r.Header.Del("X-Slack-Signature")
			return r
		}},
		{"tampered payload", func(e *interactionEnv) *http.Request {
			r := e.fake.Click(signingSecret, e.msg, slack.ActionApprove, slackAlice, t0)
			body := readBody(r)
			forged := strings.Replace(body, slackAlice, slackBob, -1)
			r.Body, r.ContentLength = ioNopCloser(forged), int64(len(forged))
			return r
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newInteractionEnv(t, toolRequest(t))
			w := e.serve(tt.req(e))
			e.h.Wait()
			if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
				t.Errorf("HTTP %d %s, want 401 in plain text", w.Code, w.Header().Get("Content-Type"))
			}
			if len(e.res.Votes()) != 0 || len(e.fake.ResponsePosts()) != 0 {
				t.Errorf("acted on an unverified request: votes %v, posts %v", e.res.Votes(), e.fake.ResponsePosts())
			}
			if logs := e.logs.String(); strings.Contains(logs, signingSecret) || strings.Contains(logs, "payload") || strings.Contains(logs, slackAlice) {
				t.Errorf("the log shows the secret or the body: %s", logs)
			}
		})
	}
}

func TestEditOpensAModal(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "edit"}
	}))
	v := e.openModal(t, slack.ActionEdit)
	if v.CallbackID != slack.ActionEdit || v.Title == "" {
		t.Errorf("view %+v", v)
	}
	if got, want := v.InitialValue(slack.InputBlockID), notifier.FormatJSON(paymentArgs, 0); got != want {
		t.Errorf("initial value %q, want %q", got, want)
	}
	var meta struct{ E, H, C, TS, R string }
	if err := json.Unmarshal([]byte(v.PrivateMetadata), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.E != eventID || meta.H != e.req.ToolCall.ArgumentsSHA256 || meta.C != channelID || meta.TS != e.msg.TS || !strings.HasPrefix(meta.R, "http") {
		t.Errorf("private_metadata %+v", meta)
	}
	if len(e.res.Votes()) != 0 {
		t.Error("opening a modal voted")
	}
	noRefusals(t, e.fake)
}

// TestEditSubmissions covers a modal submission's answers: invalid JSON and
// refusals keep the modal open with the reason next to the input.
func TestEditSubmissions(t *testing.T) {
	edit := func(r *contracts.ApprovalRequested) { r.AllowedDecisions = []string{"approve", "reject", "edit"} }
	t.Run("invalid JSON", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit))
		v := e.openModal(t, slack.ActionEdit)
		for input, want := range map[string]string{
			`{"amount": 200,`:  "Not valid JSON",
			`[1, 2]`:           "JSON object",
			`"just a string"`:  "JSON object",
			`{"amount": 2} {}`: "Not valid JSON",
		} {
			got := decodeView(t, e.submit(t, v, slackAlice, input))
			if got.ResponseAction != "errors" || !strings.Contains(got.Errors[slack.InputBlockID], want) || len(got.Errors) != 1 {
				t.Errorf("submitting %q: %+v, want an error with %q on the input", input, got, want)
			}
		}
		if len(e.res.Votes()) != 0 {
			t.Errorf("votes %+v", e.res.Votes())
		}
	})
	t.Run("refused as invalid arguments", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit))
		detail := "arguments/amount: maximum: got 5000, want 1000"
		e.res.set(func(r *resolver) { r.refuse, r.detail = contracts.ReasonInvalidArguments, detail })
		v := e.openModal(t, slack.ActionEdit)
		got := decodeView(t, e.submit(t, v, slackAlice, `{"amount":5000,"currency":"EUR","to":"acme"}`))
		msg := got.Errors[slack.InputBlockID]
		if got.ResponseAction != "errors" || !strings.Contains(msg, contracts.Reason(contracts.ReasonInvalidArguments).Message()) || !strings.Contains(msg, detail) {
			t.Errorf("response %+v", got)
		}
	})
	t.Run("refused otherwise", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit))
		e.res.set(func(r *resolver) { r.refuse = contracts.ReasonDuplicateVote })
		v := e.openModal(t, slack.ActionEdit)
		got := decodeView(t, e.submit(t, v, slackAlice, `{"amount":1}`))
		if got.ResponseAction != "errors" || !strings.Contains(got.Errors[slack.InputBlockID], contracts.Reason(contracts.ReasonDuplicateVote).Message()) {
			t.Errorf("response %+v", got)
		}
	})
	t.Run("counted", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit))
		v := e.openModal(t, slack.ActionEdit)
		got := decodeView(t, e.submit(t, v, slackAlice, "{\n  \"amount\": 200,\n  \"currency\": \"EUR\",\n  \"to\": \"acme\"\n}"))
		if got.ResponseAction != "clear" || len(got.Errors) != 0 {
			t.Errorf("response %+v, want clear", got)
		}
		e.h.Wait()
		vote := e.res.Votes()[0]
		if vote.Decision != contracts.DecisionEdit || string(vote.Arguments) != `{"amount":200,"currency":"EUR","to":"acme"}` ||
			vote.ArgumentsSHA256 != e.req.ToolCall.ArgumentsSHA256 || vote.Approver.ID != "alice" || vote.Approver.Via != contracts.ViaSlack {
			t.Errorf("vote %+v", vote)
		}
		if n := len(e.fake.CallsOf("chat.update")); n != 1 {
			t.Errorf("%d chat.update calls, want 1", n)
		}
		m := e.current(t)
		texts := joined(m.Texts())
		if m.Versions != 2 || m.HasActions() || !strings.Contains(texts, "Approved with edited arguments by alice via slack") || !strings.Contains(texts, `"amount": 200`) {
			t.Errorf("message after the edit: %q", texts)
		}
		noRefusals(t, e.fake)
	})
	t.Run("not in the directory", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit))
		v := e.openModal(t, slack.ActionEdit)
		got := decodeView(t, e.submit(t, v, slackMallory, `{"amount":1}`))
		if got.ResponseAction != "errors" || !strings.Contains(got.Errors[slack.InputBlockID], "not in the Countersign directory") || len(e.res.Votes()) != 0 {
			t.Errorf("response %+v, votes %v", got, e.res.Votes())
		}
	})
	t.Run("resolver slower than Slack waits", func(t *testing.T) {
		e := newInteractionEnv(t, toolRequest(t, edit), func(c *slack.InteractionsConfig) { c.SubmitTimeout = 20 * time.Millisecond })
		e.res.set(func(r *resolver) { r.gate = make(chan struct{}) }) // never released
		v := e.openModal(t, slack.ActionEdit)
		got := decodeView(t, e.submit(t, v, slackAlice, `{"amount":1}`))
		if got.ResponseAction != "errors" || !strings.Contains(got.Errors[slack.InputBlockID], "did not confirm") {
			t.Errorf("response %+v", got)
		}
	})
}

func TestRespondFlow(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "respond"}
	}))
	v := e.openModal(t, slack.ActionRespond)
	if v.CallbackID != slack.ActionRespond {
		t.Errorf("callback %q", v.CallbackID)
	}
	got := decodeView(t, e.submit(t, v, slackAlice, "  Split it into two payments of 125 EUR.  "))
	if got.ResponseAction != "clear" {
		t.Fatalf("response %+v", got)
	}
	e.h.Wait()
	vote := e.res.Votes()[0]
	if vote.Decision != contracts.DecisionRespond || vote.Comment != "Split it into two payments of 125 EUR." || vote.ArgumentsSHA256 != e.req.ToolCall.ArgumentsSHA256 {
		t.Errorf("vote %+v", vote)
	}
	if texts := joined(e.current(t).Texts()); !strings.Contains(texts, "Answered with feedback by alice via slack: Split it") {
		t.Errorf("message %q", texts)
	}
	noRefusals(t, e.fake)
}

func TestAnswerFlow(t *testing.T) {
	t.Run("plain text without a schema", func(t *testing.T) {
		e := newInteractionEnv(t, questionRequest())
		v := e.openModal(t, slack.ActionAnswer)
		if !strings.Contains(joined(v.Texts()), "Which region should the new cluster run in?") {
			t.Errorf("the modal does not show the question: %q", v.Texts())
		}
		got := decodeView(t, e.submit(t, v, slackAlice, "eu-west-1"))
		if got.ResponseAction != "clear" {
			t.Fatalf("response %+v", got)
		}
		e.h.Wait()
		vote := e.res.Votes()[0]
		if vote.Decision != contracts.DecisionAnswer || vote.Answer == nil || vote.Answer.Action != contracts.AnswerAccept ||
			string(vote.Answer.Content) != `{"text":"eu-west-1"}` || vote.ArgumentsSHA256 != "" {
			t.Errorf("vote %+v", vote)
		}
		if texts := joined(e.current(t).Texts()); !strings.Contains(texts, "✅ Answered by alice via slack") || !strings.Contains(texts, "eu-west-1") {
			t.Errorf("message %q", texts)
		}
		noRefusals(t, e.fake)
	})
	t.Run("JSON with a schema", func(t *testing.T) {
		e := newInteractionEnv(t, questionRequest(func(r *contracts.ApprovalRequested) {
			r.Question.Schema = json.RawMessage(`{"type":"object","properties":{"region":{"type":"string"}},"required":["region"]}`)
		}))
		v := e.openModal(t, slack.ActionAnswer)
		if got := decodeView(t, e.submit(t, v, slackAlice, "eu-west-1")); got.ResponseAction != "errors" {
			t.Errorf("plain text for a schema: %+v", got)
		}
		if got := decodeView(t, e.submit(t, v, slackAlice, `{"region":"eu-west-1"}`)); got.ResponseAction != "clear" {
			t.Errorf("JSON answer: %+v", got)
		}
		e.h.Wait()
		if votes := e.res.Votes(); len(votes) != 1 || string(votes[0].Answer.Content) != `{"region":"eu-west-1"}` {
			t.Errorf("votes %+v", votes)
		}
		noRefusals(t, e.fake)
	})
}

// TestModalOnADecidedRequest: no modal opens for a decided request.
func TestModalOnADecidedRequest(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.AllowedDecisions = []string{"approve", "reject", "edit"}
	}))
	e.res.set(func(r *resolver) { rec := approved(e.req, "bob"); r.records[eventID] = &rec })
	e.click(t, slack.ActionEdit, slackAlice)
	if len(e.fake.Views()) != 0 {
		t.Error("a modal opened")
	}
	if eph := e.ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], "already decided") {
		t.Errorf("ephemerals %q", eph)
	}
	if m := e.current(t); m.HasActions() {
		t.Error("the message still offers buttons")
	}
	noRefusals(t, e.fake)
}

// signed builds a request as Slack would with a raw form body.
func signed(body string, at time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodPost, slacktest.InteractionsURL, strings.NewReader(body))
	for k, v := range slacktest.Sign(signingSecret, at, []byte(body)) {
		r.Header[k] = v
	}
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func TestOtherRequests(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	payload := func(p string) string { return "payload=" + url.QueryEscape(p) }
	for _, tt := range []struct {
		name string
		r    *http.Request
		code int
	}{
		{"view closed", signed(payload(`{"type":"view_closed","user":{"id":"U0ALICE001"},"view":{"callback_id":"countersign_edit"}}`), t0), http.StatusOK},
		{"shortcut", signed(payload(`{"type":"shortcut","callback_id":"x","trigger_id":"1.2.3"}`), t0), http.StatusOK},
		{"another app's button", signed(payload(`{"type":"block_actions","user":{"id":"U0ALICE001"},"actions":[{"action_id":"other","value":"x"}]}`), t0), http.StatusOK},
		{"open link", signed(payload(`{"type":"block_actions","user":{"id":"U0ALICE001"},"actions":[{"action_id":"countersign_open"}]}`), t0), http.StatusOK},
		{"another app's modal", signed(payload(`{"type":"view_submission","user":{"id":"U0ALICE001"},"view":{"callback_id":"other"}}`), t0), http.StatusOK},
		{"no payload", signed("token=x", t0), http.StatusBadRequest},
		{"payload not JSON", signed(payload("{type:"), t0), http.StatusBadRequest},
		{"payload of the wrong shape", signed(payload(`{"type":"block_actions","actions":{"a":1}}`), t0), http.StatusBadRequest},
		{"not a form", signed("%zz", t0), http.StatusBadRequest},
		{"too large", signed(payload(strings.Repeat("x", slack.MaxInteractionBody)), t0), http.StatusRequestEntityTooLarge},
		{"GET", httptest.NewRequest(http.MethodGet, slacktest.InteractionsURL, nil), http.StatusMethodNotAllowed},
	} {
		w := e.serve(tt.r)
		e.h.Wait()
		if w.Code != tt.code {
			t.Errorf("%s: HTTP %d, want %d", tt.name, w.Code, tt.code)
		}
		if tt.code == http.StatusOK && w.Body.Len() != 0 {
			t.Errorf("%s: body %q, want none", tt.name, w.Body)
		}
	}
	if len(e.res.Votes()) != 0 || len(e.fake.ResponsePosts()) != 0 || len(e.fake.Views()) != 0 {
		t.Errorf("acted: votes %v", e.res.Votes())
	}
}

// TestButtonWithBadValue: a click whose value Countersign cannot read casts
// nothing and says so privately.
func TestButtonWithBadValue(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t))
	body := "payload=" + url.QueryEscape(`{"type":"block_actions","user":{"id":"U0ALICE001"},"response_url":"`+e.fake.NewResponseURL()+`","actions":[{"action_id":"countersign_approve","value":"not json"}]}`)
	w := e.serve(signed(body, t0))
	e.h.Wait()
	if w.Code != http.StatusOK || len(e.res.Votes()) != 0 {
		t.Errorf("HTTP %d, votes %v", w.Code, e.res.Votes())
	}
	if eph := e.ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], "not valid any more") {
		t.Errorf("ephemerals %q", eph)
	}
}

// TestLogsHoldNoSecrets runs the flows that log and checks no token, secret,
// response URL or request content reaches the log.
func TestLogsHoldNoSecrets(t *testing.T) {
	e := newInteractionEnv(t, toolRequest(t, func(r *contracts.ApprovalRequested) {
		r.Summary = "SUMMARY-MARKER"
		r.AllowedDecisions = []string{"approve", "reject", "edit"}
	}))
	e.serve(e.fake.Click("wrong", e.msg, slack.ActionApprove, slackAlice, t0))
	e.click(t, slack.ActionApprove, slackMallory)
	e.res.set(func(r *resolver) { r.refuse = contracts.ReasonNotAnApprover })
	e.click(t, slack.ActionApprove, slackAlice)
	e.fake.FailNext("views.open", 0, "invalid_auth", "")
	e.click(t, slack.ActionEdit, slackAlice)
	e.fake.FailNext("views.open", http.StatusServiceUnavailable, "", "")
	e.click(t, slack.ActionEdit, slackAlice)
	logs := e.logs.String()
	if !strings.Contains(logs, "views.open") || !strings.Contains(logs, eventID) {
		t.Errorf("the log lacks the failures: %s", logs)
	}
	for _, secret := range []string{botToken, signingSecret, "/actions/", "SUMMARY-MARKER", "payload=", string(paymentArgs)} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds %q:\n%s", secret, logs)
		}
	}
	if eph := e.ephemerals(); len(eph) != 4 {
		t.Errorf("ephemerals %q, want 4 (directory, refusal, two failed forms)", eph)
	}
}

func TestNewInteractionsValidates(t *testing.T) {
	_, err := slack.NewInteractions(slack.InteractionsConfig{APIURL: "ftp://x", VoteTimeout: -1})
	for _, field := range []string{"SigningSecret", "BotToken", "APIURL", "Resolver", "Users", "VoteTimeout"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

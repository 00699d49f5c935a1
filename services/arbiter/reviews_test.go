package arbiter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/approval/approvaltest"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator/reviewer"
	"github.com/countersign/countersign/services/arbiter"
)

// reviewerPolicy names reviewer triage on three rules: one that lets it
// approve low scores alone, one where it advises, one that waits long for
// it; and reviewer ghost, which no deployment configures.
const reviewerPolicy = `
version: rv1
rules:
  - name: alone
    tools: ["crm.lookup"]
    action: require_approval
    risk: low
    sensitive: ["/card"]
    allowed_decisions: [approve, reject, edit, respond]
    reviewer: {endpoint: triage, approve_below: 20, up_to_risk: medium, timeout: 1s}
  - name: advice
    tools: ["stripe.refund"]
    action: require_approval
    risk: medium
    sensitive: ["/card"]
    allowed_decisions: [approve, reject, edit, respond]
    reviewer: {endpoint: triage, timeout: 1s}
  - name: patient
    tools: ["slow.tool"]
    action: require_approval
    risk: low
    sensitive: ["/card"]
    allowed_decisions: [approve, reject, edit, respond]
    reviewer: {endpoint: triage, approve_below: 20, up_to_risk: medium, timeout: 2m}
  - name: ghost
    tools: ["ghost.tool"]
    action: require_approval
    sensitive: ["/card"]
    allowed_decisions: [approve, reject, edit, respond]
    reviewer: {endpoint: ghost, timeout: 1s}
`

// secretCard is a sensitive argument value: it must never leave Countersign.
const secretCard = "4242424242424242"

const fakeModel, fakeKey = "gpt-4.1-mini", "test-key-0123"

// fakeModel is an OpenAI-compatible chat completions endpoint that checks
// every call as strictly as the real API would, and answers by the agent
// named in the request: "score-N" with score N, "status-500" with a server
// error, "malformed" with an assistant message that is not JSON, "hang"
// not before the call gives up, "wait" once released.
type fakeEndpoint struct {
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex
	bodies   [][]byte
	problems []string
}

func newFakeEndpoint(t *testing.T) *fakeEndpoint {
	f := &fakeEndpoint{release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.open()
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range f.problems {
			t.Errorf("the reviewer was called wrongly: %s", p)
		}
	})
	return f
}

// open releases the calls that wait.
func (f *fakeEndpoint) open() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

func (f *fakeEndpoint) fail(w http.ResponseWriter, format string, args ...any) {
	f.mu.Lock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
}

func (f *fakeEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	in, ok := f.check(w, r, body)
	if !ok {
		return
	}
	content := ""
	switch agent := in.Agent; {
	case strings.HasPrefix(agent, "score-"):
		content = fmt.Sprintf(`{"score": %s, "explanation": "looks %s"}`, strings.TrimPrefix(agent, "score-"), agent)
	case agent == "status-500":
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusInternalServerError)
		return
	case agent == "malformed":
		content = "I think this call is fine."
	case agent == "hang":
		<-r.Context().Done()
		return
	case agent == "wait":
		select {
		case <-f.release:
		case <-r.Context().Done():
			return
		}
		content = `{"score": 90, "explanation": "a large refund"}`
	}
	answer := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": fakeModel,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// check holds a call to what the chat completions API accepts and returns
// the request it carries.
func (f *fakeEndpoint) check(w http.ResponseWriter, r *http.Request, body []byte) (reviewer.Input, bool) {
	var in reviewer.Input
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions":
		f.fail(w, "%s %s", r.Method, r.URL.Path)
		return in, false
	case r.Header.Get("Authorization") != "Bearer "+fakeKey:
		f.fail(w, "Authorization %q", r.Header.Get("Authorization"))
		return in, false
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		f.fail(w, "Content-Type %q", r.Header.Get("Content-Type"))
		return in, false
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		ResponseFormat struct {
			Type string `json:"type"`
		} `json:"response_format"`
		Temperature *float64 `json:"temperature"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		f.fail(w, "body: %v", err)
		return in, false
	}
	switch {
	case req.Model != fakeModel:
		f.fail(w, "model %q", req.Model)
	case len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" || req.Messages[0].Content == "":
		f.fail(w, "messages %+v", req.Messages)
	case req.ResponseFormat.Type != "json_object":
		f.fail(w, "response_format %q", req.ResponseFormat.Type)
	case json.Unmarshal([]byte(req.Messages[1].Content), &in) != nil || in.Tool == "":
		f.fail(w, "the user message is not the request as JSON: %q", req.Messages[1].Content)
	default:
		return in, true
	}
	return in, false
}

// sawSecret reports whether a body the endpoint received holds the
// sensitive value, in any form.
func (f *fakeEndpoint) sawSecret() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bodies {
		if bytes.Contains(b, []byte(secretCard)) || bytes.Contains(b, []byte("424242")) {
			return true
		}
	}
	return len(f.bodies) == 0 // a test that sent nothing proves nothing
}

// reviewBus is a bus with an arbiter that trusts reviewerPolicy and asks
// the fake endpoint as reviewer triage.
func reviewBus(t *testing.T, signer *receipt.Signer, opts ...eventstest.Option) (*bus, *fakeEndpoint) {
	t.Helper()
	srv := eventstest.NewServer(t, opts...)
	js := srv.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	b := &bus{t: t, srv: srv, js: js, kv: kv, acks: sniffAcks(t, srv.Connect())}
	f := newFakeEndpoint(t)
	b.startArbiter(arbiter.Config{
		Policies: arbiter.Policies{mustPolicy(t, reviewerPolicy)},
		Receipts: signer,
		Reviewers: map[string]*reviewer.Endpoint{"triage": {
			Name: "triage", Kind: reviewer.KindOpenAI, URL: f.srv.URL + "/v1", Model: fakeModel, APIKey: fakeKey,
		}},
	})
	return b, f
}

// reviewed is a request for tool by agent (which tells the fake how to
// answer) with a sensitive card number, under reviewerPolicy's rule.
func reviewed(t *testing.T, agent, tool, rule, risk string) contracts.ApprovalRequested {
	args := `{"card":"` + secretCard + `","customer":"c-7"}`
	return approvaltest.Request(t, func(r *contracts.ApprovalRequested) {
		r.EventID = uuid.NewString()
		r.Run.Agent = agent
		r.ToolCall.Name = tool
		r.ToolCall.Arguments = json.RawMessage(args)
		r.ToolCall.ArgumentsSHA256 = approvaltest.Hash(t, args)
		r.Sensitive = []string{"/card"}
		r.Policy = contracts.PolicyRef{Rule: rule, Version: "rv1"}
		r.Risk = risk
	})
}

func hasOpinion(r *contracts.Record) bool { return r.Review != nil && r.Review.Opinion != nil }

// TestReviewerApprovesAloneWhereTheRuleLetsIt: under a rule that lets the
// reviewer approve low scores alone, a score below approve_below approves
// the call as the reviewer's vote, and the runner claims it and gets a
// receipt naming the reviewer as the decider. The reviewer was sent the
// call with the card number masked.
func TestReviewerApprovesAloneWhereTheRuleLetsIt(t *testing.T) {
	t.Parallel()
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key, Now: busNow, TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, f := reviewBus(t, signer)
	req := reviewed(t, "score-12", "crm.lookup", "alone", contracts.RiskLow)
	b.create(req)
	rec := b.waitRecord(req.EventID, terminal)
	if rec.Status != contracts.StatusApproved || len(rec.Outcome.DecidedBy) != 1 || rec.Outcome.DecidedBy[0] != "reviewer:triage" {
		t.Fatalf("status %s decided by %v; want approved by reviewer:triage", rec.Status, rec.Outcome)
	}
	rv := rec.Review
	if rv.Effect != contracts.EffectApproved || *rv.Opinion.Score != 12 || rv.Opinion.Explanation != "looks score-12" || rv.Opinion.Error != "" {
		t.Fatalf("review %+v opinion %+v", rv, rv.Opinion)
	}
	if len(rec.Votes) != 1 || rec.Votes[0].Approver != (contracts.Approver{ID: "reviewer:triage", Via: contracts.ViaReviewer}) {
		t.Fatalf("votes %+v", rec.Votes)
	}
	b.command(contracts.Command{
		Spec: contracts.SpecCommand, CommandID: "claim-1", EventID: req.EventID, Command: contracts.CommandClaim,
		By: req.Run.Agent, ClaimID: "claim-1", IssuedAt: busNow().UTC(),
	})
	// The receipt is stored before the claim is announced (the record's
	// claim is written first): wait for the announcement.
	b.waitChanged(req.EventID, contracts.ChangeClaimed)
	claimed := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.Claim != nil })
	issued := b.issuedReceipt(req.EventID)
	opts := receipt.Options{Keys: receipt.NewKeySet(key), Replay: receipt.NewMemoryReplayStore(), Now: busNow}
	c, err := receipt.Verify(context.Background(), issued.Receipt, req.ToolCall.Name, req.ToolCall.Arguments, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.DecidedBy) != 1 || c.DecidedBy[0] != "reviewer:triage" || c.ID != claimed.Claim.ReceiptID {
		t.Fatalf("receipt claims %+v", c)
	}
	if f.sawSecret() {
		t.Fatal("the reviewer endpoint received the sensitive card number")
	}
}

// TestReviewerIsAdviceWhereTheRuleDoesNotLetIt: a score below what would
// approve, on a rule that does not let the reviewer decide (no
// approve_below; or a call whose risk is above up_to_risk), leaves the
// request to people with the opinion shown; a person then decides.
func TestReviewerIsAdviceWhereTheRuleDoesNotLetIt(t *testing.T) {
	t.Parallel()
	b, f := reviewBus(t, nil)
	for _, req := range []contracts.ApprovalRequested{
		reviewed(t, "score-3", "stripe.refund", "advice", contracts.RiskMedium),
		// The request says low, its rule says medium: the rule's risk counts.
		reviewed(t, "score-3", "stripe.refund", "advice", contracts.RiskLow),
	} {
		b.create(req)
		rec := b.waitRecord(req.EventID, hasOpinion)
		if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || rec.Review.Effect != contracts.EffectAdvice || *rec.Review.Opinion.Score != 3 {
			t.Fatalf("status %s votes %d review %+v", rec.Status, len(rec.Votes), rec.Review)
		}
		b.waitChanged(req.EventID, contracts.ChangeOpinion)
		b.vote(vote("v-"+req.EventID, "alice", contracts.DecisionApprove, func(v *contracts.Vote) { v.EventID = req.EventID }))
		if done := b.waitRecord(req.EventID, terminal); done.Outcome.DecidedBy[0] != "alice" {
			t.Fatalf("decided by %v", done.Outcome.DecidedBy)
		}
	}
	if f.sawSecret() {
		t.Fatal("the reviewer endpoint received the sensitive card number")
	}
}

// TestReviewerFailuresLeaveTheRequestToPeople: an error status, an answer
// that is not the JSON asked for, no answer within the rule's timeout and
// a reviewer nobody configured are each recorded as an opinion with an
// error, and the request stays pending for people, even on a rule that
// lets the reviewer approve alone.
func TestReviewerFailuresLeaveTheRequestToPeople(t *testing.T) {
	t.Parallel()
	b, f := reviewBus(t, nil)
	for agent, c := range map[string]struct{ tool, rule, reason string }{
		"status-500": {"crm.lookup", "alone", reviewer.ReasonStatus},
		"malformed":  {"crm.lookup", "alone", reviewer.ReasonUnparsable},
		"hang":       {"crm.lookup", "alone", reviewer.ReasonTimeout},
		"score-150":  {"crm.lookup", "alone", reviewer.ReasonUnparsable},
		"score-1":    {"ghost.tool", "ghost", reviewer.ReasonUnknown},
	} {
		req := reviewed(t, agent, c.tool, c.rule, contracts.RiskLow)
		b.create(req)
		rec := b.waitRecord(req.EventID, hasOpinion)
		o := rec.Review.Opinion
		if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || o.Score != nil || !strings.HasPrefix(o.Error, c.reason+":") {
			t.Errorf("%s: status %s votes %d opinion %+v; want pending with a %s error", agent, rec.Status, len(rec.Votes), o, c.reason)
		}
		if strings.Contains(o.Error, fakeKey) {
			t.Errorf("%s: the error shows the API key: %s", agent, o.Error)
		}
	}
	if f.sawSecret() {
		t.Fatal("the reviewer endpoint received the sensitive card number")
	}
}

// TestOnlyTheArbiterPublishesOpinions: no other role may publish an
// opinion, nor vote as a reviewer: while the reviewer thinks, forged
// opinions that would approve are refused by the server and a resolver's
// vote under the reviewer's name is dead-lettered; the reviewer's own
// opinion is the one recorded.
func TestOnlyTheArbiterPublishesOpinions(t *testing.T) {
	t.Parallel()
	// The server's refusals are what this test provokes.
	b, f := reviewBus(t, nil, eventstest.AllowViolations())
	req := reviewed(t, "wait", "slow.tool", "patient", contracts.RiskLow)
	b.create(req)
	score := 1
	forged, err := json.Marshal(contracts.Opinion{
		Spec: contracts.SpecOpinion, EventID: req.EventID, Reviewer: "triage", Score: &score,
		ArgumentsSHA256: req.ToolCall.ArgumentsSHA256, At: busNow(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := b.srv.JetStreamAs(role).Publish(ctx, contracts.OpinionSubject(req.EventID), forged)
		cancel()
		if err == nil {
			t.Errorf("%s published an opinion", role)
		}
	}
	refused := 0
	for _, v := range b.srv.Violations() {
		if strings.Contains(v, "Publish Violation") && strings.Contains(v, contracts.OpinionSubject(req.EventID)) {
			refused++
		}
	}
	if refused != 4 {
		t.Errorf("the server refused %d opinions, want 4:\n%s", refused, strings.Join(b.srv.Violations(), "\n"))
	}
	seq := b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: "as-reviewer", EventID: req.EventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "reviewer:triage", Via: contracts.ViaNATS}, DecidedAt: busNow(),
	})
	b.waitDeadLetter(t, contracts.StreamResolutions, seq)
	f.open()
	rec := b.waitRecord(req.EventID, hasOpinion)
	if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || *rec.Review.Opinion.Score != 90 {
		t.Fatalf("status %s votes %+v opinion %+v", rec.Status, rec.Votes, rec.Review.Opinion)
	}
	if got := approval.ReviewerMayApprove(&rec); !got {
		t.Fatal("the rule lets the reviewer approve; only its score kept it from it")
	}
}

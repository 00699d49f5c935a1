package slack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

const (
	botToken      = "xoxb-1111-2222-countersign-test-token"
	signingSecret = "countersign-test-signing-secret-8f7422"
	eventID       = "0190d1a2-7b3c-7def-8123-456789abcdef"
	channelID     = "C0PAYMENTS"
	channelName   = "payments"
	slackAlice    = "U0ALICE001"
	slackBob      = "U0BOB00001"
	slackMallory  = "U0MALLORY1"
	publicURL     = "https://countersign.example.com"
)

// t0 is the tests' clock: every clock in them is fixed.
var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func clock() time.Time { return t0 }

var paymentArgs = json.RawMessage(`{"amount":250,"currency":"EUR","to":"acme"}`)

func sha(t testing.TB, args json.RawMessage) string {
	t.Helper()
	s, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatalf("ArgumentsSHA256(%s): %v", args, err)
	}
	return s
}

// toolRequest is a pending payment approval; change adjusts it.
func toolRequest(t testing.TB, change ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	t.Helper()
	req := contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: eventID,
		Kind:    contracts.KindToolApproval,
		Run:     contracts.Run{ID: "run-42", Agent: "billing-agent", RequestedBy: "dave"},
		ToolCall: &contracts.ToolCall{
			ID: "call-1", Name: "send_payment", Arguments: paymentArgs, ArgumentsSHA256: sha(t, paymentArgs),
		},
		Risk:             contracts.RiskMedium,
		Summary:          "Pay 250 EUR to acme",
		Policy:           contracts.PolicyRef{Rule: "payments", Version: "7"},
		Quorum:           contracts.Quorum{Required: 1, Veto: true, Order: contracts.OrderAny},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject},
		Channels:         []string{"slack"},
		ExpiresAt:        t0.Add(time.Hour),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        t0,
	}
	for _, f := range change {
		f(&req)
	}
	if req.ToolCall != nil && req.ToolCall.ArgumentsSHA256 == "" {
		if s, err := contracts.ArgumentsSHA256(req.ToolCall.Arguments); err == nil {
			req.ToolCall.ArgumentsSHA256 = s
		}
	}
	return req
}

// questionRequest is a pending human_input question.
func questionRequest(change ...func(*contracts.ApprovalRequested)) contracts.ApprovalRequested {
	req := contracts.ApprovalRequested{
		Spec:             contracts.SpecHumanInputRequested,
		EventID:          eventID,
		Kind:             contracts.KindHumanInput,
		Run:              contracts.Run{ID: "run-43", Agent: "deploy-agent"},
		Question:         &contracts.Question{Text: "Which region should the new cluster run in?"},
		Risk:             contracts.RiskLow,
		Summary:          "deploy-agent asks which region to use",
		Quorum:           contracts.Quorum{Required: 1},
		AllowedDecisions: []string{contracts.DecisionAnswer},
		ExpiresAt:        t0.Add(time.Hour),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        t0,
	}
	for _, f := range change {
		f(&req)
	}
	return req
}

func pending(req contracts.ApprovalRequested) *contracts.Record {
	return &contracts.Record{Spec: contracts.SpecRecord, Request: req, Status: contracts.StatusPending, ExpiresAt: req.ExpiresAt, UpdatedAt: t0}
}

// newFake is the fake Slack with the payments channel and Alice's and
// Bob's direct messages.
func newFake(t *testing.T) *slacktest.Server {
	fake := slacktest.New(t, botToken)
	fake.AddChannel(channelID, channelName)
	fake.AddUser(slackAlice)
	fake.AddUser(slackBob)
	return fake
}

func newChannel(t *testing.T, fake *slacktest.Server, change ...func(*slack.Config)) *slack.Channel {
	t.Helper()
	cfg := slack.Config{BotToken: botToken, APIURL: fake.URL(), PublicURL: publicURL, HTTPClient: fake.Client(), Now: clock}
	for _, f := range change {
		f(&cfg)
	}
	ch, err := slack.New(cfg)
	if err != nil {
		t.Fatalf("slack.New: %v", err)
	}
	return ch
}

// target is the payments channel as a notification target.
var target = notifier.Target{Channel: contracts.ChannelSlack, Address: channelID}

// notify posts req and returns the stored message.
func notify(t *testing.T, fake *slacktest.Server, ch *slack.Channel, req contracts.ApprovalRequested) slacktest.Message {
	t.Helper()
	rc, err := ch.Notify(t.Context(), notifier.Requested(req, target))
	if err != nil {
		t.Fatalf("Notify: %v (refused: %v)", err, fake.Refused())
	}
	m, ok := fake.Message(rc.Ref)
	if !ok {
		t.Fatalf("the fake has no message %q", rc.Ref)
	}
	return m
}

// noRefusals fails the test if the fake refused anything.
func noRefusals(t *testing.T, fake *slacktest.Server) {
	t.Helper()
	for _, c := range fake.Refused() {
		t.Errorf("the fake refused %s", c)
	}
}

func joined(texts []string) string { return strings.Join(texts, "\n") }

// resolver is a Resolver over records in memory, counting votes as the
// arbiter does in the simple cases the tests need (one vote per approver,
// none once decided). Tests set refuse or err
// to answer otherwise, and gate to hold votes until released.
type resolver struct {
	mu      sync.Mutex
	records map[string]*contracts.Record
	votes   []contracts.Vote
	// refuse, when set, refuses every vote with this reason and detail.
	refuse, detail string
	// inFlight answers every vote as not yet decided.
	inFlight bool
	// err, when set, is returned by Vote.
	err error
	// gate, when set, holds Vote until it is closed; entered is signalled
	// when a vote arrives.
	gate    chan struct{}
	entered chan struct{}
	// returned counts the votes answered.
	returned int
	// runCalls are the DecideRun calls; decideRun answers them.
	runCalls  []runCall
	decideRun func(runID, agent string, v contracts.Vote) notifier.RunDecision
}

var _ notifier.Resolver = (*resolver)(nil)

func newResolver(recs ...*contracts.Record) *resolver {
	r := &resolver{records: map[string]*contracts.Record{}}
	for _, rec := range recs {
		r.records[rec.Request.EventID] = rec
	}
	return r
}

func (r *resolver) Record(_ context.Context, id string) (*contracts.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.records[id]
	if !ok {
		return nil, notifier.ErrUnknownEvent
	}
	c := *rec
	c.Votes = slices.Clone(rec.Votes)
	return &c, nil
}

func (r *resolver) Vote(ctx context.Context, v contracts.Vote) (notifier.VoteResult, error) {
	r.mu.Lock()
	r.votes = append(r.votes, v)
	gate, entered := r.gate, r.entered
	r.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return notifier.VoteResult{}, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned++
	if r.err != nil {
		return notifier.VoteResult{}, r.err
	}
	rec, ok := r.records[v.EventID]
	if !ok {
		return notifier.VoteResult{}, notifier.ErrUnknownEvent
	}
	if r.refuse != "" {
		c := *rec
		return notifier.VoteResult{Refused: r.refuse, Detail: r.detail, Record: &c}, nil
	}
	if r.inFlight {
		return notifier.VoteResult{InFlight: true}, nil
	}
	if rec.Terminal() {
		c := *rec
		return notifier.VoteResult{Refused: contracts.ReasonClosed, Record: &c}, nil
	}
	for _, old := range rec.Votes {
		if old.Approver.ID == v.Approver.ID {
			c := *rec
			return notifier.VoteResult{Refused: contracts.ReasonDuplicateVote, Record: &c}, nil
		}
	}
	next := *rec
	next.Votes = append(slices.Clone(rec.Votes), v)
	decide := func(status string) {
		next.Status = status
		next.Outcome = &contracts.Outcome{Decision: v.Decision, Comment: v.Comment, DecidedBy: []string{v.Approver.ID}, DecidedAt: v.DecidedAt}
	}
	switch v.Decision {
	case contracts.DecisionApprove, contracts.DecisionEdit:
		if notifier.Approvals(&next) >= max(1, next.Request.Quorum.Required) {
			decide(contracts.StatusApproved)
			next.Outcome.DecidedBy = nil
			for _, old := range next.Votes {
				next.Outcome.DecidedBy = append(next.Outcome.DecidedBy, old.Approver.ID)
			}
			if v.Decision == contracts.DecisionEdit {
				next.Outcome.Arguments = v.Arguments
			}
		}
	case contracts.DecisionReject:
		decide(contracts.StatusRejected)
	case contracts.DecisionRespond:
		decide(contracts.StatusResponded)
	case contracts.DecisionAnswer:
		decide(contracts.StatusAnswered)
		next.Outcome.Action = v.Answer.Action
		next.Outcome.Arguments = v.Answer.Content
	}
	r.records[v.EventID] = &next
	c := next
	return notifier.VoteResult{Counted: true, Record: &c}, nil
}

// runCall is one DecideRun call.
type runCall struct {
	runID, agent string
	vote         contracts.Vote
}

// DecideRun records the call and answers with decideRun, when set, or an
// empty decision. The run batch's rules are the API's, tested there with
// the arbiter.
func (r *resolver) DecideRun(_ context.Context, runID, agent string, v contracts.Vote) (notifier.RunDecision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runCalls = append(r.runCalls, runCall{runID, agent, v})
	if r.err != nil {
		return notifier.RunDecision{}, r.err
	}
	if r.decideRun != nil {
		return r.decideRun(runID, agent, v), nil
	}
	return notifier.RunDecision{}, nil
}

func (r *resolver) RunCalls() []runCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runCalls)
}

func (r *resolver) Votes() []contracts.Vote {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.votes)
}

func (r *resolver) set(f func(*resolver)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// directory maps Alice and Bob; Mallory is not in it.
func directory(slackID string) (string, bool) {
	switch slackID {
	case slackAlice:
		return "alice", true
	case slackBob:
		return "bob", true
	}
	return "", false
}

type slackFake = slacktest.Server

func readBody(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func ioNopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

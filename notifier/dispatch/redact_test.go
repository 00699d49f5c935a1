package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/email/smtptest"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/slack/slacktest"
	"github.com/countersign/countersign/notifier/webhook"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// The secrets of these tests. ssnSecret is named by the rule, editedSecret
// is what an approver's edit puts in its place, pinSecret is marked by the
// tool schema. plainValue is an argument nobody marks.
const (
	ssnSecret    = "123-45-6789"
	editedSecret = "987-65-4321"
	pinSecret    = "4242-PIN-9090"
	plainValue   = "Ann Example"
)

var secrets = []string{ssnSecret, editedSecret, pinSecret}

const payrollPolicyYAML = `
version: payroll-redact-1
rules:
  - name: payroll
    tools: ["payroll.*"]
    action: require_approval
    approvers: [alice, bob]
    allowed_decisions: [approve, reject, edit]
    channels: ["slack:#payroll", "email:alice", "webhook:masked", "webhook:full"]
    summary: "Pay {{args.name}} (SSN {{args.ssn}}, PIN {{args.pin}})"
    sensitive: [/ssn]
`

// logBuffer is a log sink safe for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger(component string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", component)
}

// hookSink is a webhook endpoint that keeps every body it is sent.
type hookSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newHookSink(t *testing.T) *hookSink {
	h := &hookSink{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, body)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookSink) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(bytes.Join(h.bodies, []byte("\n")))
}

// TestSensitiveValuesNeverLeaveInNotificationsLogsOrMetrics runs the gate,
// the arbiter and the notifier with real Slack (the strict fake), email
// (an SMTP server) and webhook channels. Two requests carry secrets: one
// the rule marks, one the tool schema marks; an approver edits the first,
// so the outcome carries a diff of a sensitive value. Every Slack API call,
// every email, every webhook body, every log line of every component and
// every metric label is searched for the secrets: none holds one, while
// the plain arguments are shown, the mask and the inbox link are there,
// and the one webhook endpoint that opted in receives the real values.
func TestSensitiveValuesNeverLeaveInNotificationsLogsOrMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	srv := eventstest.NewServer(t)
	if err := events.Provision(ctx, srv.JetStream(), events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte(payrollPolicyYAML))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()

	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Policies: arbiter.Policies{pol},
		Logger: logs.logger("arbiter"), Registerer: reg})

	const publicURL = "https://countersign.example.com"
	fake := slacktest.New(t, "xoxb-redact-test")
	fake.AddChannel("C0PAYROLL01", "payroll")
	slackCh, err := slack.New(slack.Config{BotToken: "xoxb-redact-test", APIURL: fake.URL(), HTTPClient: fake.Client(),
		PublicURL: publicURL, Logger: logs.logger("slack")})
	if err != nil {
		t.Fatal(err)
	}
	smtp := smtptest.Start(t)
	host, port := smtp.Addr()
	links, err := email.NewLinks([]email.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, email.MinSecretLen)}})
	if err != nil {
		t.Fatal(err)
	}
	emailCh, err := email.New(email.Config{SMTP: email.SMTPConfig{Host: host, Port: port, TLS: email.TLSNone, Timeout: 5 * time.Second},
		From: "countersign@example.com", PublicURL: publicURL, Links: links, Logger: logs.logger("email")})
	if err != nil {
		t.Fatal(err)
	}
	masked, full := newHookSink(t), newHookSink(t)
	hookSecret := "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hookCh, err := webhook.New(webhook.Config{Logger: logs.logger("webhook"), Endpoints: []webhook.Endpoint{
		{Name: "masked", URL: masked.srv.URL, Secrets: []string{hookSecret}},
		{Name: "full", URL: full.srv.URL, Secrets: []string{hookSecret}, IncludeSensitive: true},
	}})
	if err != nil {
		t.Fatal(err)
	}

	e := &env{t: t, srv: srv, js: srv.JetStream(), more: make(chan struct{})}
	e.collectReceipts()
	e.start(dispatch.Config{Channels: []notifier.Channel{slackCh, emailCh, hookCh}, Endpoints: []string{"masked", "full"},
		Logger: logs.logger("notifier"), Registerer: reg})

	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: srv.JetStreamAs(embedded.RoleOrchestrator),
		Policy: orchestrator.StaticPolicy{P: pol}, Logger: logs.logger("gate")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })

	run := contracts.Run{ID: "run-" + uuid.NewString(), Agent: "payroll-bot", RequestedBy: "erin"}
	calls := []orchestrator.ToolCall{
		{ID: "pay-1", Name: "payroll.pay", Arguments: json.RawMessage(`{"name":"` + plainValue + `","ssn":"` + ssnSecret + `","amount":2500}`)},
		{ID: "pay-2", Name: "payroll.pin", Arguments: json.RawMessage(`{"name":"` + plainValue + `","pin":"` + pinSecret + `"}`),
			Schema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"pin":{"type":"string","x-sensitive":true}}}`)},
	}
	vs, err := gate.Submit(ctx, run, calls)
	if err != nil {
		t.Fatal(err)
	}
	first, second := vs[0].EventID, vs[1].EventID
	// Four targets each: the Slack channel, alice's email, two endpoints.
	e.receiptsFor(first, 4)
	e.receiptsFor(second, 4)

	// Alice edits the first request's SSN: the outcome holds the new value
	// and a diff of a sensitive field.
	edited := json.RawMessage(`{"name":"` + plainValue + `","ssn":"` + editedSecret + `","amount":2500}`)
	vote := contracts.Vote{Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: first, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaAPI}, Arguments: edited, DecidedAt: time.Now().UTC()}
	if _, err := events.Publish(ctx, srv.JetStream(), contracts.ResolvedSubject(first), vote, vote.VoteID, nil); err != nil {
		t.Fatal(err)
	}
	e.vote(second, "bob", contracts.DecisionReject)
	for _, id := range []string{first, second} {
		e.waitDecided(id)
		for range 4 {
			e.receipt("an outcome update of "+id, func(r notifier.Receipt) bool {
				return r.EventID == id && r.Kind == notifier.KindDecided && r.Status == contracts.ReceiptDelivered
			})
		}
	}

	// Reminders are delivered by the same channels; send one of each
	// request through every channel too.
	kv, err := srv.JetStream().KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second} {
		entry, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var rec contracts.Record
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if id == first && (rec.Outcome == nil || !strings.Contains(string(rec.Outcome.Arguments), editedSecret)) {
			t.Fatalf("the record keeps the real edited arguments; outcome %+v", rec.Outcome)
		}
		for _, target := range []struct {
			ch notifier.Channel
			t  notifier.Target
		}{
			{slackCh, notifier.Target{Channel: contracts.ChannelSlack, Address: "C0PAYROLL01"}},
			{emailCh, notifier.Target{Channel: contracts.ChannelEmail, Address: "alice@example.com", Approver: "alice"}},
			{hookCh, notifier.Target{Channel: contracts.ChannelWebhook, Address: "masked"}},
		} {
			if _, err := target.ch.Notify(ctx, notifier.Reminder(rec.Request, target.t, 1)); err != nil {
				t.Fatalf("reminder on %s: %v", target.t.Channel, err)
			}
		}
	}

	// Everything that left Countersign, and everything it logged.
	var slackBodies strings.Builder
	for _, c := range fake.Calls() {
		slackBodies.Write(c.Body)
		slackBodies.WriteByte('\n')
	}
	var mails strings.Builder
	for _, m := range smtp.Messages() {
		c, err := m.Content()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&mails, "%s\n%s\n%s\n%s\n", m.Data, c.Subject, c.Text, c.HTML)
	}
	var labels strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels.WriteString(l.GetName() + "=" + l.GetValue() + "\n")
			}
		}
	}
	shown := map[string]string{
		"slack API calls":       slackBodies.String(),
		"emails":                mails.String(),
		"masked webhook bodies": masked.all(),
	}
	private := map[string]string{"logs": logs.String(), "metric labels": labels.String()}
	for what, s := range shown {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s show the secret %q", what, secret)
			}
		}
		if !strings.Contains(s, plainValue) || !strings.Contains(s, approval.Mask) {
			t.Errorf("%s do not show the plain value %q and the mask %q", what, plainValue, approval.Mask)
		}
	}
	for what, s := range private {
		if len(s) == 0 {
			t.Fatalf("no %s captured", what)
		}
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s hold the secret %q", what, secret)
			}
		}
	}
	for what, s := range map[string]string{"slack API calls": slackBodies.String(), "emails": mails.String()} {
		if !strings.Contains(s, publicURL+"/approvals/"+first) || !strings.Contains(s, "are sensitive") {
			t.Errorf("%s neither link to the inbox nor say why values are masked", what)
		}
	}
	if !strings.Contains(logs.String(), `"component":"slack"`) && !strings.Contains(logs.String(), `"component":"notifier"`) {
		t.Errorf("the components' logs were not captured")
	}
	// The endpoint that opted in gets every real value.
	for _, secret := range secrets {
		if !strings.Contains(full.all(), secret) {
			t.Errorf("the include_sensitive endpoint did not receive %q", secret)
		}
	}
}

// collectReceipts records every receipt published, as newEnv does.
func (e *env) collectReceipts() {
	nc := e.srv.Connect()
	e.t.Cleanup(nc.Close)
	sub, err := nc.Subscribe(contracts.SubjectNotifyPrefix+">", func(m *nats.Msg) {
		var r notifier.Receipt
		if err := json.Unmarshal(m.Data, &r); err != nil {
			e.t.Errorf("receipt: %v", err)
			return
		}
		e.mu.Lock()
		e.receipts = append(e.receipts, r)
		e.taken = append(e.taken, false)
		close(e.more)
		e.more = make(chan struct{})
		e.mu.Unlock()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
}

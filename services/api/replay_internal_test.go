package api

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator/policy"
)

// replayOld is the policy the recorded requests were gated by; replayNew
// the candidate replayed against them.
const (
	replayOld = `
version: old-1
default: require_approval
groups: {finance: [ann, bob, cid]}
rules:
  - {name: reads, tools: ["read_*"], action: allow}
  - {name: payments, tools: ["payments.*"], action: require_approval, risk: high, approvers: ["group:finance"]}
  - {name: email, tools: ["email.*"], action: require_approval, risk: medium}
`
	replayNew = `
version: new-1
default: deny
groups: {finance: [ann, bob, cid], treasury: [dan, eve]}
rules:
  - {name: small, tools: ["payments.*"], when: 'args.amount < 50', action: allow}
  - {name: large, tools: ["payments.*"], when: 'args.amount >= 5000', action: require_approval, risk: critical, quorum: 2, approvers: ["group:treasury"], step_up: passkey}
  - {name: payments, tools: ["payments.*"], action: require_approval, risk: high, approvers: ["group:finance"]}
  - {name: email, tools: ["email.*"], action: require_approval, risk: high}
`
)

// historyWriter writes generated records straight into the approvals
// bucket's stream, as the arbiter would, and remembers the expected replay.
type historyWriter struct {
	old, cand *policy.Policy
	now       time.Time
	q         ReplayQuery
	reader    approval.Reader
	rng       *rand.Rand
	// want counts, per "rule field from→to", the changes direct evaluation
	// finds; hidden the unreadable ones; requests per rule.
	want, hidden, requests map[string]int
}

func newHistoryWriter(t *testing.T) *historyWriter {
	t.Helper()
	old, err := policy.Parse([]byte(replayOld))
	if err != nil {
		t.Fatal(err)
	}
	cand, err := policy.Parse([]byte(replayNew))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return &historyWriter{
		old: old, cand: cand, now: now, q: ReplayQuery{Since: now.Add(-30 * 24 * time.Hour), Until: now},
		reader: approval.Reader{ID: "audrey", Auditor: true, Tenants: []string{"acme"}},
		rng:    rand.New(rand.NewPCG(7, uint64(now.Unix()))),
		want:   map[string]int{}, hidden: map[string]int{}, requests: map[string]int{},
	}
}

// record is the i-th generated request, gated by the old policy, and its
// record: tools, amounts, tenants and creation times (some before the
// window) drawn at random.
func (h *historyWriter) record(i int) contracts.Record {
	tools := []string{"payments.send", "payments.refund", "email.send", "crm.update"}
	run := contracts.Run{ID: "run-" + strconv.Itoa(i), Agent: []string{"billing-bot", "mailer"}[h.rng.IntN(2)],
		Tenant: []string{"acme", "globex"}[h.rng.IntN(2)]}
	args := fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","note":"invoice %d for services rendered"}`, h.rng.IntN(10000), i)
	tool := tools[h.rng.IntN(len(tools))]
	d := h.old.Evaluate(policy.Input{Run: run, Tool: tool, Arguments: args})
	created := h.now.Add(-time.Duration(h.rng.Int64N(int64(40 * 24 * time.Hour))))
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: fmt.Sprintf("evt-%07d", i), Kind: contracts.KindToolApproval, Run: run,
		ToolCall: &contracts.ToolCall{ID: "c", Name: tool, Arguments: args, ArgumentsSHA256: contracts.CanonicalSHA256(args)},
		Risk:     d.Risk, Summary: "s", Policy: contracts.PolicyRef{Rule: d.Rule, Version: d.Version},
		Quorum:     contracts.Quorum{Required: d.Quorum, Approvers: d.Approvers, Veto: true, Order: contracts.OrderAny},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{}, AllowedDecisions: d.AllowedDecisions, Channels: []string{},
		ExpiresAt: created.Add(24 * time.Hour), OnTimeout: contracts.OnTimeoutReject, CreatedAt: created,
	}
	if i%97 == 0 {
		req.Kind, req.ToolCall = contracts.KindHumanInput, nil
		req.Question = &contracts.Question{Text: "Which account?"}
	}
	rec := approval.NewRecord(req, created)
	rec.Status = []string{contracts.StatusPending, contracts.StatusApproved, contracts.StatusRejected, contracts.StatusExpired}[h.rng.IntN(4)]
	return rec
}

// expect evaluates rec's call with the candidate directly and counts what
// a replay must report for it.
func (h *historyWriter) expect(rec *contracts.Record) {
	req := &rec.Request
	if req.CreatedAt.Before(h.q.Since) || !req.CreatedAt.Before(h.q.Until) || req.Kind == contracts.KindHumanInput {
		return
	}
	d := h.cand.Evaluate(policy.RequestInput(req))
	h.requests[d.Rule]++
	var changes []string
	if d.Action != policy.ActionRequireApproval {
		changes = append(changes, "action require_approval→"+d.Action)
	} else {
		set := func(l []string) string {
			if len(l) == 0 {
				return "anyone"
			}
			l = slices.Sorted(slices.Values(l))
			return strings.Join(l, ",")
		}
		stepUp := func(s string) string {
			if s == "" {
				return "none"
			}
			return s
		}
		for _, c := range [][3]string{
			{"quorum", strconv.Itoa(max(1, req.Quorum.Required)), strconv.Itoa(max(1, d.Quorum))},
			{"risk", req.Risk, d.Risk},
			{"step_up", stepUp(req.StepUp), stepUp(d.StepUp)},
			{"approvers", set(req.Quorum.Approvers), set(d.Approvers)},
		} {
			if c[1] != c[2] {
				changes = append(changes, c[0]+" "+c[1]+"→"+c[2])
			}
		}
	}
	for _, c := range changes {
		h.want[d.Rule+" "+c]++
		if !approval.CanRead(rec, h.reader) {
			h.hidden[d.Rule+" "+c]++
		}
	}
}

// write writes n records into the bucket with js, a window of them at a
// time, each with the summary headers the arbiter's writer adds.
func (h *historyWriter) write(t *testing.T, js nats.JetStreamContext, n int) {
	t.Helper()
	for i := range n {
		rec := h.record(i)
		h.expect(&rec)
		data, err := contracts.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		m := &nats.Msg{Subject: events.RecordSubject(rec.Request.EventID), Header: events.RecordHeader(&rec), Data: data}
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if i%4096 == 4095 {
			h.flush(t, js)
		}
	}
	h.flush(t, js)
}

func (h *historyWriter) flush(t *testing.T, js nats.JetStreamContext) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the records were not stored within a minute")
	}
}

// replayed runs a replay of a history of n records as the API's user and
// returns its report and the highest live heap seen while it ran, above
// the heap before it (both after a collection).
func replayed(t *testing.T, n int) (*historyWriter, policy.ReplayReport, uint64) {
	t.Helper()
	srv := eventstest.NewServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// In memory: the server's store is then part of the heap before the
	// replay, and reading it allocates nothing that outlives a page.
	if err := events.Provision(ctx, srv.JetStream(), events.ProvisionConfig{Memory: true}); err != nil {
		t.Fatal(err)
	}
	h := newHistoryWriter(t)
	js, err := srv.Connect().JetStream()
	if err != nil {
		t.Fatal(err)
	}
	h.write(t, js, n)
	nc := srv.ConnectAs(embedded.RoleAPI)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before, peak, pages := heap(), uint64(0), 0
	rp := policy.NewReplay(h.cand, policy.ReplayOptions{Examples: 2})
	scanned, err := replayHistory(ctx, nc, rp, h.reader, h.q, func(ReplayProgress) {
		if pages++; pages%16 == 0 {
			peak = max(peak, heap())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	peak = max(peak, heap())
	if scanned != uint64(n) {
		t.Fatalf("scanned %d record messages, want %d", scanned, n)
	}
	if peak < before {
		return h, rp.Report(), 0
	}
	return h, rp.Report(), peak - before
}

// TestReplayOfALargeHistory: a replay of 100,000 recorded requests reports
// exactly the changes that evaluating each request with the candidate
// finds, per rule, with examples only of requests the reader may read; and
// the heap it needs while it runs does not grow with the history (10,000
// records against 100,000).
func TestReplayOfALargeHistory(t *testing.T) {
	var grown [2]uint64
	for i, n := range []int{10000, 100000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			h, rep, grew := replayed(t, n)
			grown[i] = grew
			got, hidden, requests := map[string]int{}, map[string]int{}, map[string]int{}
			for _, r := range rep.Rules {
				requests[r.Rule] = r.Requests
				for _, c := range r.Changes {
					key := r.Rule + " " + c.Field + " " + c.From + "→" + c.To
					got[key], hidden[key] = c.Count, c.Hidden
					if len(c.Examples) > 2 || len(c.Examples) == 0 && c.Count > c.Hidden {
						t.Errorf("%s: %d examples of %d (%d hidden)", key, len(c.Examples), c.Count, c.Hidden)
					}
					for _, ex := range c.Examples {
						if ex.Tenant != "acme" {
							t.Errorf("%s: example %s of tenant %q, which the reader may not read", key, ex.EventID, ex.Tenant)
						}
					}
				}
			}
			if !maps.Equal(got, h.want) || !maps.Equal(hidden, withoutZeros(h.hidden, h.want)) || !maps.Equal(requests, h.requests) {
				t.Errorf("replay:\n%v\n%v\n%v\ndirect evaluation:\n%v\n%v\n%v", got, hidden, requests, h.want, h.hidden, h.requests)
			}
			if len(h.want) < 6 {
				t.Errorf("the history shows only %d kinds of change: %v", len(h.want), h.want)
			}
			t.Logf("%d records: %d replayed, %d changed, %d questions; heap grew by %d KiB while replaying",
				n, rep.Requests, rep.Changed, rep.Questions, grew>>10)
		})
	}
	// A replay that held the records would need about ten times more for
	// ten times the history (tens of MiB at 100,000: each record is
	// several hundred bytes encoded, more decoded).
	const slack = 8 << 20
	if grown[1] > grown[0]+slack || grown[1] > 24<<20 {
		t.Errorf("the heap grew by %d KiB replaying 100,000 records and by %d KiB replaying 10,000", grown[1]>>10, grown[0]>>10)
	}
}

// withoutZeros is hidden with a zero for every key of all it lacks.
func withoutZeros(hidden, all map[string]int) map[string]int {
	out := maps.Clone(hidden)
	for k := range all {
		if _, ok := out[k]; !ok {
			out[k] = 0
		}
	}
	return out
}

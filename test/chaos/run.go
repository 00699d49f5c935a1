package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/arbiter"
)

// Result is what a run found.
type Result struct {
	Problems []string
	Summary  string
}

// Run drives load and faults for the configured duration, quiesces, and
// checks the invariants.
func (h *Harness) Run(ctx context.Context) Result {
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	finish, stopFinish := context.WithCancel(ctx)
	defer stopFinish()

	var count atomic.Int64
	w := h.startWorkers(load, finish, &count)
	h.faultPhase(ctx)
	h.logf("fault phase over after %s; %d requests so far", time.Since(h.started).Round(time.Millisecond), count.Load())

	if h.cfg.QuorumChecks {
		h.quorumChecks(ctx)
	}
	stopLoad()

	// Quiesce: everything runs again; pending work gets a bounded time.
	h.logf("quiescing")
	h.restartAll(ctx)
	h.waitWorkers(w, stopFinish)
	h.waitSettled(ctx)
	return h.check(ctx)
}

// workers are the goroutines that make load: agents making requests, the
// bot deciding on them and the voters it starts.
type workers struct {
	agents, bots, voters sync.WaitGroup
}

// startWorkers starts the agents, which make new requests until load ends
// and finish what they have until finish ends, and the bot.
func (h *Harness) startWorkers(load, finish context.Context, count *atomic.Int64) *workers {
	w := &workers{}
	for i := range h.cfg.Agents {
		w.agents.Add(1)
		go func() {
			defer w.agents.Done()
			h.agent(load, finish, i+1, count)
		}()
	}
	w.bots.Add(1)
	go func() {
		defer w.bots.Done()
		h.bot(finish, &w.voters)
	}()
	return w
}

// faultPhase injects faults for the configured duration.
func (h *Harness) faultPhase(ctx context.Context) {
	faultCtx, stopFaults := context.WithTimeout(ctx, h.cfg.Duration)
	defer stopFaults()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		h.faultLoop(faultCtx)
	}()
	<-faultCtx.Done()
	<-faultsDone
}

// restartAll starts every NATS node and process that is down.
func (h *Harness) restartAll(ctx context.Context) {
	for _, nd := range h.cluster.nodes {
		if !nd.running() {
			if err := nd.start(); err != nil {
				h.problems.add("quiesce: start %s: %v", nd.name, err)
			}
		}
	}
	h.checkAlive()
	for _, p := range h.procs {
		if ok, _ := p.alive(); !ok {
			if err := p.start(ctx); err != nil {
				h.problems.add("quiesce: start %s: %v", p.name, err)
			}
		}
	}
}

// waitWorkers gives the agents and the votes still planned the quiesce
// time to finish, then stops them and waits for them to return.
func (h *Harness) waitWorkers(w *workers, stopFinish context.CancelFunc) {
	deadline := time.Now().Add(h.cfg.Quiesce)
	agentsDone := make(chan struct{})
	go func() { w.agents.Wait(); close(agentsDone) }()
	select {
	case <-agentsDone:
	case <-time.After(time.Until(deadline)):
		h.problems.add("quiesce: agents did not finish within %s", h.cfg.Quiesce)
	}
	// Votes still planned on decided requests are sent too: a vote after
	// the decision must be recorded as refused.
	votersDone := make(chan struct{})
	go func() { w.voters.Wait(); close(votersDone) }()
	select {
	case <-votersDone:
	case <-time.After(time.Until(deadline)):
		h.problems.add("quiesce: votes still unacknowledged after %s", h.cfg.Quiesce)
	}
	stopFinish()
	<-agentsDone
	w.bots.Wait()
	<-votersDone
}

// waitSettled waits until the cluster is healthy, the arbiter has handled
// every request and vote, and the notifications went out.
func (h *Harness) waitSettled(ctx context.Context) {
	if err := h.waitHealthy(ctx); err != nil {
		h.problems.add("quiesce: cluster not healthy: %v", err)
	}
	// A vote the bus acknowledged may still wait in the arbiter's consumer
	// (held back while its record was being created after an outage);
	// the records are read once every request and vote has been handled.
	if err := waitDrained(ctx, h.js, map[string]string{
		contracts.StreamRequests:    arbiter.DurableRequests,
		contracts.StreamResolutions: arbiter.DurableResolutions,
	}); err != nil {
		h.problems.add("quiesce: the arbiter did not handle every request and vote: %v", err)
	}
	h.waitNotifications(time.Now().Add(60 * time.Second))
	h.checkAlive()
}

// quorumChecks stops one NATS node and runs a full cycle (review, votes
// over the API and NATS, resume, claim), then stops a second one and
// expects 503 unavailable from the API, then brings both back; the
// request refused while two were down is re-submitted and must finish.
func (h *Harness) quorumChecks(ctx context.Context) {
	nodes := h.cluster.nodes
	if err := h.waitHealthy(ctx); err != nil {
		h.problems.add("quorum checks: cluster not healthy before: %v", err)
		return
	}
	h.logf("quorum: stopping %s (one of three down)", nodes[0].name)
	nodes[0].stop()
	h.countFault("stop NATS node")
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	r := h.newRequest("chaos-quorum", 1_000_000)
	verdict, _, ok := h.review(cctx, r, "")
	if !ok || verdict != "pending" {
		h.problems.add("one node down: review got %q (ok=%v), want pending", verdict, ok)
	}
	api := &vote{id: "q1-" + r.eventID, eventID: r.eventID, approver: "alice", via: "api", decision: contracts.DecisionApprove}
	bus := &vote{id: "q2-" + r.eventID, eventID: r.eventID, approver: "carol", via: "nats", decision: contracts.DecisionApprove}
	h.mu.Lock()
	h.votes = append(h.votes, api, bus)
	h.botSeen[r.eventID] = true
	h.mu.Unlock()
	h.send(cctx, api)
	h.send(cctx, bus)
	verdict, args, ok := h.review(cctx, r, "30s")
	if !ok || verdict != "allowed" {
		h.problems.add("one node down: resumed review got %q (ok=%v), want allowed", verdict, ok)
	} else {
		h.execute(cctx, r, args)
	}
	cancel()
	h.mu.Lock()
	executed := 0
	for _, e := range h.executions {
		if e.eventID == r.eventID {
			executed++
		}
	}
	h.mu.Unlock()
	if executed != 1 {
		h.problems.add("one node down: the approved call ran %d times, want 1", executed)
	}
	h.quorumNotes = append(h.quorumNotes, fmt.Sprintf("one of three down: review → API vote + NATS vote → resume → claim → run: %s",
		map[bool]string{true: "ok", false: "FAILED"}[ok && verdict == "allowed" && executed == 1]))

	h.logf("quorum: stopping %s too (two of three down)", nodes[1].name)
	nodes[1].stop()
	h.countFault("stop NATS node")
	before := h.unavailable.Load()
	r2 := h.newRequest("chaos-quorum", 1_000_001)
	reviewCode, voteCode := h.expectUnavailable(ctx, r2, r.eventID)
	h.quorumNotes = append(h.quorumNotes, fmt.Sprintf("two of three down: review → %s, vote → %s (503 unavailable answers during the outage: %d)",
		reviewCode, voteCode, h.unavailable.Load()-before))

	h.logf("quorum: starting %s and %s again", nodes[0].name, nodes[1].name)
	for _, nd := range nodes[:2] {
		if err := nd.start(); err != nil {
			h.problems.add("quorum: restart %s: %v", nd.name, err)
		}
	}
	if err := h.waitHealthy(ctx); err != nil {
		h.problems.add("quorum: cluster not healthy after the outage: %v", err)
	}
	// The request refused during the outage is retried like any agent
	// does; the invariants at the end check it finished.
	rctx, rcancel := context.WithTimeout(ctx, h.cfg.Quiesce)
	h.finishRequest(rctx, r2)
	rcancel()
	r2.mu.Lock()
	final := r2.final
	r2.mu.Unlock()
	h.quorumNotes = append(h.quorumNotes, fmt.Sprintf("after both returned: the refused review, re-submitted, ended %q", final))
	if final == "" {
		h.problems.add("quorum: the review refused during the outage did not finish after the nodes returned")
	}
}

// expectUnavailable posts a review and a vote while two of three nodes are
// down and expects 503 with code unavailable for both.
func (h *Harness) expectUnavailable(ctx context.Context, r *request, decided string) (string, string) {
	check := func(what string, do func(context.Context, int) (int, []byte, error)) string {
		for i := range h.apis {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			st, data, err := do(cctx, i)
			cancel()
			if err != nil {
				h.problems.add("two nodes down: %s on %s: %v (want 503 unavailable)", what, h.apis[i].name, err)
				return "error " + err.Error()
			}
			var e apiErrorBody
			_ = json.Unmarshal(data, &e)
			if st != http.StatusServiceUnavailable || e.Error.Code != "unavailable" {
				h.problems.add("two nodes down: %s on %s answered %d %s (want 503 unavailable)", what, h.apis[i].name, st, strings.TrimSpace(string(data)))
				return fmt.Sprintf("%d %s", st, e.Error.Code)
			}
		}
		return "503 unavailable"
	}
	rc := check("review", func(ctx context.Context, i int) (int, []byte, error) {
		return h.call(ctx, i, "agent", http.MethodPost, "/v1/reviews", r.body())
	})
	vc := check("vote", func(ctx context.Context, i int) (int, []byte, error) {
		return h.call(ctx, i, "bob", http.MethodPost, "/v1/approvals/"+decided+"/votes",
			map[string]any{"vote_id": fmt.Sprintf("outage-%d-%s", i, decided), "decision": "approve"})
	})
	return rc, vc
}

// waitNotifications waits until every request the agents saw has its
// requested webhook and every decided one its decided webhook.
func (h *Harness) waitNotifications(deadline time.Time) {
	ids := h.answeredIDs()
	h.hook.waitUntil(deadline, func() bool {
		for _, id := range ids {
			if !h.hook.has(id, contracts.SpecApprovalRequested) || !h.hook.has(id, contracts.SpecDecided) {
				return false
			}
		}
		return true
	})
}

// answeredIDs are the event ids of requests whose review was answered.
func (h *Harness) answeredIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, r := range h.requests {
		r.mu.Lock()
		if r.answered {
			ids = append(ids, r.eventID)
		}
		r.mu.Unlock()
	}
	return ids
}

// check reads every record and decided event and checks the invariants.
func (h *Harness) check(ctx context.Context) Result {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	records := map[string]*contracts.Record{}
	kv, err := h.js.KeyValue(cctx, contracts.BucketApprovals)
	if err != nil {
		h.problems.add("check: open %s: %v", contracts.BucketApprovals, err)
		return h.result(records, nil)
	}
	w, err := kv.WatchAll(cctx)
	if err != nil {
		h.problems.add("check: watch %s: %v", contracts.BucketApprovals, err)
		return h.result(records, nil)
	}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var rec contracts.Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			h.problems.add("record %s does not decode: %v", e.Key(), err)
			continue
		}
		records[e.Key()] = &rec
	}
	_ = w.Stop()
	stream, err := h.js.Stream(cctx, contracts.StreamEvents)
	var decided map[string]uint64
	if err == nil {
		var info *jetstream.StreamInfo
		info, err = stream.Info(cctx, jetstream.WithSubjectFilter(contracts.SubjectDecidedPrefix+">"))
		if err == nil {
			decided = map[string]uint64{}
			for subj, n := range info.State.Subjects {
				decided[strings.TrimPrefix(subj, contracts.SubjectDecidedPrefix)] = n
			}
		}
	}
	if err != nil {
		h.problems.add("check: read %s: %v", contracts.StreamEvents, err)
	}
	return h.result(records, decided)
}

// result checks the invariants over what the run recorded and the records
// and decided events read back, and writes the summary.
func (h *Harness) result(records map[string]*contracts.Record, decided map[string]uint64) Result {
	s := h.snapshot()
	t := tally{statuses: map[string]int{}}
	h.checkRequests(s.requests, s.votes, records, &t)
	h.checkDecided(records, decided, &t)
	h.checkExecutions(s.execs, records)
	h.checkVotes(s.votes, records, &t)
	h.checkWebhooks(records, &t)
	probs := h.problems.all()
	return Result{Problems: probs, Summary: h.summary(s, records, t, probs)}
}

// snapshot is a copy of what the run recorded, taken once at the end.
type snapshot struct {
	requests []*request
	votes    []*vote
	execs    []execution
	faults   map[string]int
}

func (h *Harness) snapshot() snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	faults := map[string]int{}
	for k, v := range h.faults {
		faults[k] = v
	}
	return snapshot{
		requests: append([]*request(nil), h.requests...),
		votes:    append([]*vote(nil), h.votes...),
		execs:    append([]execution(nil), h.executions...),
		faults:   faults,
	}
}

// tally is what the checks counted, for the summary.
type tally struct {
	answered, pending int
	statuses          map[string]int
	cycles            []time.Duration
	decided           int

	sent, acked, viaAPI, viaNATS, counted, refused int

	hookRaw, hookDistinct, missingReq, missingDec int
}

// checkRequests checks every answered request: its record exists, holds
// the request's arguments, agrees with the agent's verdict, and is
// terminal unless it is legitimately pending.
func (h *Harness) checkRequests(requests []*request, votes []*vote, records map[string]*contracts.Record, t *tally) {
	// Acknowledged votes by event, for "legitimately pending".
	acked := map[string][]*vote{}
	for _, v := range votes {
		if v.acked {
			acked[v.eventID] = append(acked[v.eventID], v)
		}
	}
	for _, r := range requests {
		r.mu.Lock()
		ans, final := r.answered, r.final
		if !r.done.IsZero() {
			t.cycles = append(t.cycles, r.done.Sub(r.created))
		}
		r.mu.Unlock()
		rec := records[r.eventID]
		if !ans {
			if rec != nil && rec.Request.ToolCall != nil && rec.Request.ToolCall.ArgumentsSHA256 != r.sha {
				h.problems.add("%s: record holds arguments %s, the request sent %s", r.eventID, rec.Request.ToolCall.ArgumentsSHA256, r.sha)
			}
			continue
		}
		t.answered++
		if rec == nil {
			h.problems.add("%s: the review was answered but no record exists (request lost)", r.eventID)
			continue
		}
		t.statuses[rec.Status]++
		if rec.Request.ToolCall == nil || rec.Request.ToolCall.ArgumentsSHA256 != r.sha {
			h.problems.add("%s: record's arguments_sha256 differs from the request's %s", r.eventID, r.sha)
		}
		if !rec.Terminal() {
			t.pending++
			h.checkLegitimatelyPending(r.eventID, acked[r.eventID])
		}
		h.checkVerdict(r.eventID, final, rec)
	}
}

// checkLegitimatelyPending flags a pending record whose acknowledged votes
// should have decided it.
func (h *Harness) checkLegitimatelyPending(eventID string, acked []*vote) {
	approvals, rejects := map[string]bool{}, 0
	for _, v := range acked {
		if v.approver == outsider {
			continue
		}
		if v.decision == contracts.DecisionApprove {
			approvals[v.approver] = true
		} else {
			rejects++
		}
	}
	if len(approvals) >= quorum || rejects > 0 {
		h.problems.add("%s: still pending although %d distinct approvals and %d rejections were acknowledged", eventID, len(approvals), rejects)
	}
}

// checkVerdict checks that the agent's final verdict agrees with the record.
func (h *Harness) checkVerdict(eventID, final string, rec *contracts.Record) {
	switch final {
	case "allowed", "already_executed":
		if rec.Status != contracts.StatusApproved {
			h.problems.add("%s: agent got %q but the record is %s", eventID, final, rec.Status)
		}
	case "denied":
		if rec.Status != contracts.StatusRejected {
			h.problems.add("%s: agent got denied but the record is %s", eventID, rec.Status)
		}
	case "":
	default:
		h.problems.add("%s: agent got unexpected verdict %q (record %s)", eventID, final, rec.Status)
	}
}

// checkDecided checks exactly one outcome: one decided event per terminal
// record, none for a pending one. A nil decided means it could not be read.
func (h *Harness) checkDecided(records map[string]*contracts.Record, decided map[string]uint64, t *tally) {
	if decided == nil {
		return
	}
	for id, rec := range records {
		n := decided[id]
		t.decided += int(n)
		switch {
		case rec.Terminal() && n != 1:
			h.problems.add("%s: %s record has %d decided events, want exactly 1", id, rec.Status, n)
		case !rec.Terminal() && n != 0:
			h.problems.add("%s: pending record has %d decided events", id, n)
		}
	}
	for id := range decided {
		if records[id] == nil {
			h.problems.add("%s: decided event without a record", id)
		}
	}
}

// checkExecutions checks that only approved calls ran, with the approved
// arguments, under the confirmed claim, once.
func (h *Harness) checkExecutions(execs []execution, records map[string]*contracts.Record) {
	ran := map[string]int{}
	for _, e := range execs {
		ran[e.eventID]++
		rec := records[e.eventID]
		switch {
		case rec == nil:
			h.problems.add("%s: executed without a record", e.eventID)
		case rec.Status != contracts.StatusApproved:
			h.problems.add("%s: executed but the record is %s", e.eventID, rec.Status)
		case rec.Outcome == nil || rec.Outcome.ArgumentsSHA256 != e.sha:
			h.problems.add("%s: executed arguments %s do not match the approved outcome", e.eventID, e.sha)
		case rec.Claim == nil || rec.Claim.ClaimID != e.claimID:
			h.problems.add("%s: executed under claim %s but the record's claim is %+v", e.eventID, e.claimID, rec.Claim)
		}
	}
	for id, n := range ran {
		if n > 1 {
			h.problems.add("%s: approved call executed %d times", id, n)
		}
	}
	for id, rec := range records {
		if rec.Claim != nil && ran[id] == 0 {
			// A claim confirmed while its runner gave up (end of the run)
			// is the one legitimate case; the runner retries the same id
			// until answered, so it is not expected here.
			h.problems.add("%s: record claimed by %s but nothing ran under that claim", id, rec.Claim.ClaimID)
		}
	}
}

// checkVotes checks that no acknowledged vote was lost: each is either
// counted or refused on its record, as its answer said.
func (h *Harness) checkVotes(votes []*vote, records map[string]*contracts.Record, t *tally) {
	for _, v := range votes {
		t.sent++
		if v.via == "nats" {
			t.viaNATS++
		} else {
			t.viaAPI++
		}
		if !v.acked {
			continue
		}
		t.acked++
		rec := records[v.eventID]
		if rec == nil {
			h.problems.add("vote %s on %s acknowledged but the record does not exist", v.id, v.eventID)
			continue
		}
		if rec.RefusedVotesOmitted > 0 {
			h.problems.add("%s: %d refused votes omitted; the check cannot see them", v.eventID, rec.RefusedVotesOmitted)
		}
		found := h.voteFate(v, rec)
		switch {
		case found == "":
			h.problems.add("vote %s (%s via %s, %s, answer %d) on %s acknowledged but in neither votes nor refused_votes (record %s)",
				v.id, v.approver, v.via, v.decision, v.status, v.eventID, rec.Status)
		case found == "counted":
			t.counted++
			if v.status == http.StatusForbidden || v.status == http.StatusConflict {
				h.problems.add("vote %s answered %d but counted", v.id, v.status)
			}
		default:
			t.refused++
			if v.status == http.StatusOK {
				h.problems.add("vote %s answered 200 but %s", v.id, found)
			}
			if v.approver == outsider && found != "refused:"+contracts.ReasonNotAnApprover && found != "refused:"+contracts.ReasonClosed {
				h.problems.add("vote %s by %s %s, want not_an_approver (or closed after the decision)", v.id, outsider, found)
			}
		}
		if v.approver == outsider && found == "counted" {
			h.problems.add("vote %s by %s (not an approver) was counted", v.id, outsider)
		}
	}
}

// voteFate is where the record holds the vote: "counted", "refused:<reason>"
// or "" when it holds it nowhere. A counted vote must carry its approver.
func (h *Harness) voteFate(v *vote, rec *contracts.Record) string {
	found := ""
	for _, x := range rec.Votes {
		if x.VoteID == v.id {
			found = "counted"
			if x.Approver.ID != v.approver {
				h.problems.add("vote %s counted for %s, sent by %s", v.id, x.Approver.ID, v.approver)
			}
		}
	}
	for _, x := range rec.RefusedVotes {
		if x.VoteID == v.id {
			found = "refused:" + x.Reason
		}
	}
	return found
}

// checkWebhooks checks the notifications: every request its requested
// webhook and every decided one its outcome; each notification one id.
func (h *Harness) checkWebhooks(records map[string]*contracts.Record, t *tally) {
	h.hook.mu.Lock()
	defer h.hook.mu.Unlock()
	t.hookRaw, t.hookDistinct = h.hook.raw, len(h.hook.ids)
	for _, b := range h.hook.bad {
		h.problems.add("webhook: %s", b)
	}
	for k, ids := range h.hook.byKey {
		if len(ids) > 1 {
			h.problems.add("webhook %s for %s arrived under %d different webhook-ids (a de-duplicating receiver processes it twice)", k.spec, k.eventID, len(ids))
		}
	}
	for id, rec := range records {
		if !h.hook.has(id, contracts.SpecApprovalRequested) {
			t.missingReq++
			h.problems.add("%s: no requested webhook", id)
		}
		if rec.Terminal() && !h.hook.has(id, contracts.SpecDecided) {
			t.missingDec++
			h.problems.add("%s: %s but no decided webhook", id, rec.Status)
		}
	}
}

// summary is the run's report: what was done, what was counted, and
// whether the invariants hold.
func (h *Harness) summary(s snapshot, records map[string]*contracts.Record, t tally, probs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed                      %d\n", h.cfg.Seed)
	fmt.Fprintf(&b, "fault phase               %s (run took %s)\n", h.cfg.Duration, time.Since(h.started).Round(time.Second))
	total := 0
	for _, k := range sortedKeys(s.faults) {
		total += s.faults[k]
		fmt.Fprintf(&b, "faults: %-18s %d\n", k, s.faults[k])
	}
	fmt.Fprintf(&b, "faults: total             %d\n", total)
	fmt.Fprintf(&b, "requests                  %d made, %d answered, %d records\n", len(s.requests), t.answered, len(records))
	fmt.Fprintf(&b, "records by status         %s\n", formatCounts(t.statuses))
	fmt.Fprintf(&b, "request → verdict         %s\n", formatLatency(t.cycles))
	fmt.Fprintf(&b, "decided events            %d (pending records: %d)\n", t.decided, t.pending)
	fmt.Fprintf(&b, "votes                     %d sent (%d API, %d NATS), %d acknowledged, %d counted, %d refused\n", t.sent, t.viaAPI, t.viaNATS, t.acked, t.counted, t.refused)
	fmt.Fprintf(&b, "executions                %d (claims refused: %d, already_executed re-runs: %d)\n", len(s.execs), h.claimRefused.Load(), h.alreadyExec.Load())
	fmt.Fprintf(&b, "webhook deliveries        %d raw, %d distinct ids (missing requested: %d, missing decided: %d)\n", t.hookRaw, t.hookDistinct, t.missingReq, t.missingDec)
	fmt.Fprintf(&b, "client retries            %d review attempts retried, %d answers 503 unavailable\n", h.reviewErrors.Load(), h.unavailable.Load())
	for _, n := range h.quorumNotes {
		fmt.Fprintf(&b, "quorum: %s\n", n)
	}
	h.writeAnomalies(&b)
	if len(probs) == 0 {
		b.WriteString("invariants                all hold: terminal or legitimately pending; one outcome each; no unapproved or mismatched execution; no double execution; no acknowledged vote lost; every notification delivered, one id each\n")
	} else {
		fmt.Fprintf(&b, "invariants                %d VIOLATIONS\n", len(probs))
	}
	return b.String()
}

// writeAnomalies writes the anomalies by kind, with a few examples each.
func (h *Harness) writeAnomalies(b *strings.Builder) {
	h.mu.Lock()
	byKind := map[string][]string{}
	for _, a := range h.anomalies {
		byKind[a.kind] = append(byKind[a.kind], a.text)
	}
	fmt.Fprintf(b, "anomalies (no invariant)  %d\n", len(h.anomalies))
	h.mu.Unlock()
	for _, k := range sortedKeys(byKind) {
		ex := byKind[k]
		fmt.Fprintf(b, "  %-45s %d (e.g. %s)\n", k+":", len(ex), strings.Join(ex[:min(3, len(ex))], ", "))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func formatLatency(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(f float64) time.Duration { return ds[int(f*float64(len(ds)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s, p90 %s, max %s over %d requests (includes the bot's voting delays and outages)", q(0.5), q(0.9), q(1), len(ds))
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

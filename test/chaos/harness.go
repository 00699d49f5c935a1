// Package chaos is Countersign's fault harness: a 3-node NATS JetStream
// cluster in process, two replicas of every Countersign role as separate
// processes, a steady load of reviews, votes from several channels and
// claims, and a seeded schedule of kill -9 and NATS node restarts. At the
// end it quiesces and checks the product's invariants.
package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// Config is one run of the harness.
type Config struct {
	Binary   string        // the countersign binary
	Dir      string        // where stores, data directories and configs go
	Seed     uint64        // seeds the fault schedule and the votes
	Duration time.Duration // how long load and faults run
	Agents   int           // concurrent agents
	// FaultGap bounds the pause between two faults.
	FaultGapMin, FaultGapMax time.Duration
	// QuorumChecks runs the one-node-down and two-nodes-down checks after
	// the fault phase.
	QuorumChecks bool
	// Quiesce bounds how long pending work may take to finish at the end.
	Quiesce time.Duration
	Logf    func(format string, args ...any)
}

// Approvers of the chaos policy. alice and bob vote through the API with
// their own tokens, carol and dave as a trusted NATS integration; mallory
// has an approver token but is not on the list.
var (
	apiApprovers  = []string{"alice", "bob"}
	natsApprovers = []string{"carol", "dave"}
	outsider      = "mallory"
)

const quorum = 2

// eventNamespace is the contract's UUIDv5 namespace of event ids.
var eventNamespace = uuid.MustParse("886a1d92-e7fc-5f25-afdd-55b3e40e8255")

const tenant = "chaos"

// request is one gated tool call an agent made.
type request struct {
	agent, runID, callID, tool string
	args                       json.RawMessage
	sha                        string
	eventID                    string // expected, from the contract's UUIDv5

	mu       sync.Mutex
	answered bool   // a review was answered 200 at least once
	final    string // the final verdict the agent acted on
	created  time.Time
	done     time.Time // when the final verdict arrived
}

// vote is one vote the bot sent.
type vote struct {
	id, eventID, approver, via, decision string
	acked                                bool // publish acknowledged, or the API answered 200/202/403/409
	status                               int  // the API's answer (0 over NATS)
}

// execution is one run of a gated tool.
type execution struct {
	eventID, sha, claimID string
}

// Harness is one running fault-injection environment.
type Harness struct {
	cfg      Config
	cluster  *cluster
	procs    []*proc
	apis     []*proc
	hook     *receiver
	nc       *nats.Conn
	js       jetstream.JetStream
	http     *http.Client
	tokens   map[string]string // subject → bearer token
	problems problems

	mu         sync.Mutex
	requests   []*request
	votes      []*vote
	executions []execution
	botQueue   chan *request
	botSeen    map[string]bool

	faults       map[string]int
	unavailable  atomic.Int64 // 503 unavailable answers seen by clients
	reviewErrors atomic.Int64 // review attempts that failed and were retried
	alreadyExec  atomic.Int64 // already_executed verdicts on re-runs
	claimRefused atomic.Int64 // claims refused with already_claimed
	quorumNotes  []string
	anomalies    []anomalyNote
	started      time.Time
}

// anomaly notes a wrong answer that breaks no invariant (the product
// stays safe) but that a user would see.
func (h *Harness) anomaly(kind, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.anomalies = append(h.anomalies, anomalyNote{kind: kind, text: fmt.Sprintf(format, args...)})
}

type anomalyNote struct{ kind, text string }

// problems collects invariant violations.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.list...)
}

func randomToken(prefix string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Start brings the whole environment up: cluster, streams, configs and
// two replicas of every role.
func Start(ctx context.Context, cfg Config) (*Harness, error) {
	h := &Harness{
		cfg: cfg, tokens: map[string]string{}, faults: map[string]int{}, botSeen: map[string]bool{},
		botQueue: make(chan *request, 100000),
		http:     &http.Client{Timeout: 45 * time.Second},
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	h.hook = newReceiver(key)
	if err := h.setUp(ctx, key); err != nil {
		h.Close()
		return nil, err
	}
	h.started = time.Now()
	return h, nil
}

// setUp starts the cluster, provisions it, writes the configuration and
// starts every role; the caller closes h when it fails.
func (h *Harness) setUp(ctx context.Context, hookKey []byte) error {
	if err := h.startBus(ctx); err != nil {
		return err
	}
	confPath, err := h.writeConfig(hookKey)
	if err != nil {
		return err
	}
	policyPath, err := h.writePolicy()
	if err != nil {
		return err
	}
	common := []string{"--config", confPath, "--policy", policyPath}
	if err := h.newProcs(common); err != nil {
		return err
	}
	return h.startProcs(ctx)
}

// startBus starts the 3-node cluster, connects the harness to it and
// provisions the streams and buckets with three replicas.
func (h *Harness) startBus(ctx context.Context) error {
	c, err := startCluster(ctx, 3, func(i int) string { return filepath.Join(h.cfg.Dir, fmt.Sprintf("nats-%d", i+1)) })
	if err != nil {
		return err
	}
	h.cluster = c
	if h.nc, err = c.connect("chaos-harness"); err != nil {
		return err
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return waitFor(pctx, 60*time.Second, "provisioning", func(ctx context.Context) error {
		return events.Provision(ctx, h.js, events.ProvisionConfig{Replicas: 3})
	})
}

// writeConfig writes the roles' configuration: the cluster, a token per
// agent and approver, and the webhook to the harness's receiver.
func (h *Harness) writeConfig(hookKey []byte) (string, error) {
	var tokens []map[string]any
	addToken := func(subject string, roles ...string) {
		t := randomToken("cs_chaos_")
		h.tokens[subject] = t
		sum := sha256.Sum256([]byte(t))
		tokens = append(tokens, map[string]any{"name": subject, "subject": subject, "sha256": hex.EncodeToString(sum[:]), "roles": roles})
	}
	addToken("agent", "agent")
	for _, a := range apiApprovers {
		addToken(a, "approver")
	}
	// carol and dave vote through NATS, not the API: they hold tokens only
	// so that the directory every role judges by lists them (a resolver's
	// vote from someone it does not list is refused unknown_approver).
	for _, a := range natsApprovers {
		addToken(a, "approver")
	}
	// The outsider also reads every request (viewer), so that its votes
	// reach the arbiter and are refused there as not_an_approver; without
	// a read scope they would be answered 404, as for a request that does
	// not exist.
	addToken(outsider, "approver", "viewer")
	conf := map[string]any{
		"nats":   map[string]any{"url": h.cluster.urls(), "user": natsUser, "password": natsPassword, "replicas": 3},
		"tokens": tokens,
		"notify": map[string]any{
			"webhooks": []map[string]any{{
				"name": "chaos", "url": h.hook.srv.URL + "/hook", "tenants": []string{tenant},
				"secrets": []string{"whsec_" + base64.StdEncoding.EncodeToString(hookKey)}, "timeout": "5s",
			}},
			"retry": map[string]any{"attempts": 30, "initial": "200ms", "max": "2s"},
		},
	}
	confJSON, _ := json.MarshalIndent(conf, "", "  ") // JSON is YAML
	confPath := filepath.Join(h.cfg.Dir, "countersign.yaml")
	return confPath, os.WriteFile(confPath, confJSON, 0o600)
}

// writePolicy writes the chaos policy: every chaos tool needs a quorum of
// the API and NATS approvers, with veto.
func (h *Harness) writePolicy() (string, error) {
	policyPath := filepath.Join(h.cfg.Dir, "policy.yaml")
	all := append(append([]string{}, apiApprovers...), natsApprovers...)
	pol := fmt.Sprintf(`version: "chaos-1"
default: require_approval
rules:
  - name: chaos
    tools: ["chaos.*"]
    action: require_approval
    approvers: [%s]
    quorum: %d
    veto: true
    timeout: 1h
    channels: ["webhook:chaos"]
`, strings.Join(all, ", "), quorum)
	return policyPath, os.WriteFile(policyPath, []byte(pol), 0o600)
}

// newProcs prepares two replicas of every role.
func (h *Harness) newProcs(common []string) error {
	for _, role := range []string{"arbiter", "api", "notifier"} {
		for i := 1; i <= 2; i++ {
			level := "info"
			if role == "notifier" {
				level = "debug"
			}
			p, err := newProc(h.cfg.Binary, role, i, h.cfg.Dir, append(slices.Clone(common), "--log-level", level))
			if err != nil {
				return err
			}
			h.procs = append(h.procs, p)
			if role == "api" {
				h.apis = append(h.apis, p)
			}
		}
	}
	return nil
}

// startProcs starts every replica. The first api replica stores the
// policy; it starts alone so the others find it live.
func (h *Harness) startProcs(ctx context.Context) error {
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	if err := h.apis[0].start(sctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(h.procs))
	for i, p := range h.procs {
		if p == h.apis[0] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.start(sctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops every process and node.
func (h *Harness) Close() {
	for _, p := range h.procs {
		p.kill()
	}
	if h.nc != nil {
		h.nc.Close()
	}
	if h.cluster != nil {
		h.cluster.shutdown()
	}
	h.hook.close()
}

func (h *Harness) logf(format string, args ...any) {
	if h.cfg.Logf != nil {
		h.cfg.Logf(format, args...)
	}
}

// ---- HTTP ----

type apiErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends a JSON request to the api replica i (any running one when i
// is negative) and returns the status and body. status 0 is a transport
// error.
func (h *Harness) call(ctx context.Context, i int, subject, method, path string, body any) (int, []byte, error) {
	base := ""
	if i >= 0 {
		base = h.apis[i%len(h.apis)].URL()
	} else {
		start := mrand.IntN(len(h.apis))
		for k := range h.apis {
			if u := h.apis[(start+k)%len(h.apis)].URL(); u != "" {
				base = u
				break
			}
		}
	}
	if base == "" {
		return 0, nil, errors.New("no api replica is running")
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.tokens[subject])
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		var e apiErrorBody
		if json.Unmarshal(data, &e) == nil && e.Error.Code == "unavailable" {
			h.unavailable.Add(1)
		}
	}
	return resp.StatusCode, data, nil
}

// pause waits d or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ---- agents ----

type reviewAnswer struct {
	Results []struct {
		ToolCallID string          `json:"tool_call_id"`
		Verdict    string          `json:"verdict"`
		EventID    string          `json:"event_id"`
		Reason     string          `json:"reason"`
		Arguments  json.RawMessage `json:"arguments"`
	} `json:"results"`
}

func (h *Harness) newRequest(agent string, n int) *request {
	args := fmt.Sprintf(`{"target":"svc-%d","amount":%d,"note":"chaos run %d"}`, n%17, n*10, n)
	sha, _ := contracts.ArgumentsSHA256([]byte(args))
	r := &request{
		agent: agent, runID: uuid.NewString(), callID: fmt.Sprintf("call-%d", n),
		tool: []string{"chaos.deploy", "chaos.pay", "chaos.delete"}[n%3], args: json.RawMessage(args), sha: sha,
		created: time.Now(),
	}
	r.eventID = uuid.NewSHA1(eventNamespace, []byte(tenant+"\n"+agent+"\n"+r.runID+"\n"+r.callID)).String()
	h.mu.Lock()
	h.requests = append(h.requests, r)
	h.mu.Unlock()
	return r
}

func (r *request) body() map[string]any {
	return map[string]any{
		"run":        map[string]any{"id": r.runID, "agent": r.agent, "tenant": tenant, "requested_by": "user-" + r.agent},
		"tool_calls": []map[string]any{{"id": r.callID, "name": r.tool, "arguments": r.args}},
	}
}

// review posts r's review (a re-attach after the first) and returns the
// answer, retrying transport errors and 5xx until ctx ends.
func (h *Harness) review(ctx context.Context, r *request, wait string) (verdict string, args json.RawMessage, ok bool) {
	for ctx.Err() == nil {
		path := "/v1/reviews"
		if wait != "" {
			path += "?wait=" + wait
		}
		st, data, err := h.call(ctx, -1, "agent", http.MethodPost, path, r.body())
		if err != nil || st >= 500 {
			h.reviewErrors.Add(1)
			pause(ctx, time.Duration(100+mrand.IntN(400))*time.Millisecond)
			continue
		}
		if st != http.StatusOK {
			h.problems.add("review of %s answered %d: %s", r.eventID, st, data)
			return "", nil, false
		}
		var ans reviewAnswer
		if err := json.Unmarshal(data, &ans); err != nil || len(ans.Results) != 1 {
			h.problems.add("review of %s: undecodable answer %s", r.eventID, data)
			return "", nil, false
		}
		res := ans.Results[0]
		r.mu.Lock()
		r.answered = true
		r.mu.Unlock()
		if res.EventID != r.eventID {
			h.problems.add("review of run %s call %s returned event_id %s, want %s (re-attach by run id and tool call id)",
				r.runID, r.callID, res.EventID, r.eventID)
		}
		return res.Verdict, res.Arguments, true
	}
	return "", nil, false
}

// agent makes requests until load ends, and finishes each one (waits for
// the decision, claims and executes) until finish ends.
func (h *Harness) agent(load, finish context.Context, idx int, count *atomic.Int64) {
	name := fmt.Sprintf("chaos-agent-%d", idx)
	for load.Err() == nil {
		n := int(count.Add(1))
		r := h.newRequest(name, n)
		h.finishRequest(finish, r)
	}
}

// finishRequest drives one request to its end as an agent runtime does.
func (h *Harness) finishRequest(ctx context.Context, r *request) {
	queued := false
	wait := "" // the first review returns once the request is recorded
	for ctx.Err() == nil {
		verdict, args, ok := h.review(ctx, r, wait)
		wait = "20s"
		if !ok {
			return
		}
		switch verdict {
		case "pending":
			if !queued {
				queued = true
				h.queueVotes(r)
			}
			continue
		case "allowed":
			r.mu.Lock()
			r.done = time.Now()
			r.mu.Unlock()
			h.execute(ctx, r, args)
		default:
			r.mu.Lock()
			r.final, r.done = verdict, time.Now()
			r.mu.Unlock()
		}
		return
	}
}

func (h *Harness) queueVotes(r *request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.botSeen[r.eventID] {
		return
	}
	h.botSeen[r.eventID] = true
	h.botQueue <- r
}

// execute claims r's approval right before running the tool; a rival
// runner (a duplicate of the same run) sometimes races for the same
// approval. Only a confirmed claim executes.
func (h *Harness) execute(ctx context.Context, r *request, args json.RawMessage) {
	r.mu.Lock()
	r.final = "allowed"
	r.mu.Unlock()
	rng := mrand.New(mrand.NewPCG(h.cfg.Seed, hashString(r.eventID)))
	var wg sync.WaitGroup
	runners := 1
	if rng.IntN(10) < 3 {
		runners = 2
	}
	for range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.claimAndRun(ctx, r, args, uuid.NewString())
		}()
	}
	wg.Wait()
	// A re-run of the same agent step after executing must not run again.
	verdict, again, ok := h.review(ctx, r, "")
	for ok && verdict == "pending" {
		h.anomaly("re-run of an executed call answered pending", "%s", r.eventID)
		verdict, again, ok = h.review(ctx, r, "20s")
	}
	if !ok {
		return
	}
	switch verdict {
	case "already_executed":
		h.alreadyExec.Add(1)
	case "allowed":
		// A replica whose view lags may still say allowed; the claim is
		// what stops a second run.
		h.claimAndRun(ctx, r, again, uuid.NewString())
	default:
		h.problems.add("re-run of executed %s got verdict %q", r.eventID, verdict)
	}
}

// claimAndRun claims with claimID (retrying the same id through errors
// and in-flight answers) and records an execution when the claim is
// confirmed.
func (h *Harness) claimAndRun(ctx context.Context, r *request, args json.RawMessage, claimID string) {
	for ctx.Err() == nil {
		st, data, err := h.call(ctx, -1, "agent", http.MethodPost, "/v1/approvals/"+r.eventID+"/claim", map[string]string{"claim_id": claimID})
		switch {
		case err != nil || st >= 500 || st == http.StatusAccepted || st == http.StatusNotFound:
			pause(ctx, time.Duration(100+mrand.IntN(400))*time.Millisecond)
			continue
		case st == http.StatusOK:
			sha, err := contracts.ArgumentsSHA256(args)
			if err != nil {
				h.problems.add("allowed %s carried arguments that do not hash: %v", r.eventID, err)
				return
			}
			h.mu.Lock()
			h.executions = append(h.executions, execution{eventID: r.eventID, sha: sha, claimID: claimID})
			h.mu.Unlock()
			return
		case st == http.StatusConflict:
			var e apiErrorBody
			_ = json.Unmarshal(data, &e)
			if e.Error.Code == contracts.ReasonNotApproved {
				// The call was allowed, so its record is approved: this
				// refusal comes from a replica's stale read. Noted, and
				// the claim is tried again.
				h.anomaly("claim of an allowed call refused not_approved", "%s", r.eventID)
				pause(ctx, 500*time.Millisecond)
				continue
			}
			if e.Error.Code != contracts.ReasonAlreadyClaimed {
				h.problems.add("claim of %s refused with %s: %s", r.eventID, e.Error.Code, data)
			}
			h.claimRefused.Add(1)
			return
		default:
			h.problems.add("claim of %s answered %d: %s", r.eventID, st, data)
			return
		}
	}
}

// ---- the voting bot ----

// bot votes on every queued request, from the API with approver tokens and
// from NATS as a trusted integration, until finish ends.
func (h *Harness) bot(finish context.Context, wg *sync.WaitGroup) {
	sem := make(chan struct{}, 24)
	for {
		select {
		case <-finish.Done():
			return
		case r := <-h.botQueue:
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				h.voteOn(finish, r)
			}()
		}
	}
}

func hashString(s string) uint64 {
	sum := sha256.Sum256([]byte(s))
	var v uint64
	for _, b := range sum[:8] {
		v = v<<8 | uint64(b)
	}
	return v
}

// voteOn sends a seeded plan of votes: two to four listed approvers in a
// random order (mostly approvals, sometimes a rejection), sometimes an
// outsider, a second vote by the same person, or a retry of the same vote
// id. Every plan can decide the request.
func (h *Harness) voteOn(ctx context.Context, r *request) {
	rng := mrand.New(mrand.NewPCG(h.cfg.Seed, hashString(r.eventID)^0x5eed))
	people := append(append([]string{}, apiApprovers...), natsApprovers...)
	rng.Shuffle(len(people), func(i, j int) { people[i], people[j] = people[j], people[i] })
	n := 2 + rng.IntN(3)
	type planned struct {
		v     *vote
		delay time.Duration
		retry bool
	}
	var plan []planned
	add := func(approver, decision string) *vote {
		via := "api"
		for _, a := range natsApprovers {
			if a == approver {
				via = "nats"
			}
		}
		v := &vote{id: uuid.NewString(), eventID: r.eventID, approver: approver, via: via, decision: decision}
		plan = append(plan, planned{v: v, delay: time.Duration(rng.IntN(300)) * time.Millisecond, retry: rng.IntN(5) == 0})
		return v
	}
	for _, p := range people[:n] {
		d := contracts.DecisionApprove
		if rng.IntN(100) < 15 {
			d = contracts.DecisionReject
		}
		add(p, d)
	}
	if rng.IntN(5) == 0 {
		add(outsider, contracts.DecisionApprove)
	}
	if rng.IntN(6) == 0 {
		add(people[0], contracts.DecisionApprove)
	}
	h.mu.Lock()
	for _, p := range plan {
		h.votes = append(h.votes, p.v)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !pause(ctx, p.delay) {
				return
			}
			h.send(ctx, p.v)
			if p.retry {
				// The same vote id again: counted once.
				h.send(ctx, p.v)
			}
		}()
	}
	wg.Wait()
}

// send delivers v until it is acknowledged or ctx ends.
func (h *Harness) send(ctx context.Context, v *vote) {
	for ctx.Err() == nil {
		if v.via == "nats" {
			msg := contracts.Vote{
				Spec: contracts.SpecVote, VoteID: v.id, EventID: v.eventID, Decision: v.decision,
				Approver: contracts.Approver{ID: v.approver, Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC(),
			}
			if v.decision == contracts.DecisionReject {
				msg.Comment = "rejected by the chaos bot"
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := events.Publish(pctx, h.js, contracts.ResolvedSubject(v.eventID), msg, v.id, nil)
			cancel()
			if err == nil {
				h.mu.Lock()
				v.acked = true
				h.mu.Unlock()
				return
			}
			pause(ctx, time.Duration(100+mrand.IntN(400))*time.Millisecond)
			continue
		}
		body := map[string]any{"vote_id": v.id, "decision": v.decision}
		if v.decision == contracts.DecisionReject {
			body["comment"] = "rejected by the chaos bot"
		}
		st, data, err := h.call(ctx, -1, v.approver, http.MethodPost, "/v1/approvals/"+v.eventID+"/votes", body)
		switch {
		case err != nil || st >= 500 || st == http.StatusNotFound:
			pause(ctx, time.Duration(100+mrand.IntN(400))*time.Millisecond)
			continue
		case st == http.StatusOK || st == http.StatusAccepted || st == http.StatusForbidden || st == http.StatusConflict:
			h.mu.Lock()
			v.acked = true
			if v.status == 0 || st != http.StatusAccepted {
				v.status = st
			}
			h.mu.Unlock()
			return
		default:
			h.problems.add("vote %s on %s by %s answered %d: %s", v.id, v.eventID, v.approver, st, data)
			return
		}
	}
}

// ---- faults ----

// faults kills and restarts role processes and stops and restarts NATS
// nodes, one fault at a time, on a schedule drawn from the seed.
func (h *Harness) faultLoop(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(h.cfg.Seed, 0xfa017))
	for {
		gap := h.cfg.FaultGapMin + time.Duration(rng.Int64N(int64(h.cfg.FaultGapMax-h.cfg.FaultGapMin)+1))
		if !pause(ctx, gap) {
			return
		}
		if rng.IntN(10) < 6 {
			p := h.procs[rng.IntN(len(h.procs))]
			down := time.Duration(200+rng.IntN(1800)) * time.Millisecond
			h.logf("fault %s: kill -9 %s for %s", time.Since(h.started).Round(time.Millisecond), p.name, down)
			p.kill()
			h.countFault("kill -9 " + p.role)
			time.Sleep(down) // the process stays down this long, even when the run ends
			if err := p.start(context.Background()); err != nil {
				h.problems.add("restart of %s: %v", p.name, err)
			}
		} else {
			nd := h.cluster.nodes[rng.IntN(len(h.cluster.nodes))]
			down := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
			h.logf("fault %s: stop NATS %s for %s", time.Since(h.started).Round(time.Millisecond), nd.name, down)
			nd.stop()
			h.countFault("stop NATS node")
			time.Sleep(down)
			if err := nd.start(); err != nil {
				h.problems.add("restart of NATS %s: %v", nd.name, err)
			}
			// The next fault waits until every replica caught up, so two
			// nodes are never behind at once.
			if err := h.waitHealthy(context.Background()); err != nil {
				h.problems.add("cluster after restarting %s: %v", nd.name, err)
			}
		}
		h.checkAlive()
	}
}

func (h *Harness) countFault(kind string) {
	h.mu.Lock()
	h.faults[kind]++
	h.mu.Unlock()
}

var allStreams = []string{
	contracts.StreamRequests, contracts.StreamResolutions, contracts.StreamEvents, contracts.StreamTimers,
	contracts.StreamDeadLetter, "KV_" + contracts.BucketApprovals, "KV_" + contracts.BucketPolicy, "KV_" + contracts.BucketSessions,
}

// waitHealthy waits until every stream has a leader and every replica is
// current.
func (h *Harness) waitHealthy(ctx context.Context) error {
	return waitStreams(ctx, h.js, allStreams)
}

// checkAlive reports processes that exited on their own and starts them.
func (h *Harness) checkAlive() {
	for _, p := range h.procs {
		if ok, err := p.alive(); !ok && err != nil {
			h.problems.add("%v; log tail:\n%s", err, p.logTail(20))
			p.kill()
			if err := p.start(context.Background()); err != nil {
				h.problems.add("restart of %s: %v", p.name, err)
			}
		}
	}
}

package approval_test

// Property tests of the pure approval state machine (issue 4): for any
// interleaving of votes, commands and timer fires, a record reaches at most
// one outcome, is never approved without a quorum of distinct approvers of
// the final arguments, and is never approved by its requester or owner unless
// the rule allows it.
//
// A scenario is decoded from bytes (so the fuzzer can explore it) into a
// request and up to propMaxOps operations. Every operation is applied with
// ApplyVote, ApplyCommand or Expire, and the checker compares each step with
// a small independent model of DESIGN.md §5 built from the record's own
// history. FuzzVoteInterleavings explores with the fuzzer;
// TestVoteInterleavings runs the same checker over fixed pseudo-random
// scenarios, and TestVoteInterleavingSeeds pins the seed corpus.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

const (
	propEventID = "9b1f6a8e-3c2d-5e4f-8a7b-6c5d4e3f2a1b"
	propMaxOps  = 32
	// propPrefill refused votes push a record over contracts.MaxRefusedVotes
	// after a few more refusals.
	propPrefill = contracts.MaxRefusedVotes - 1
)

var propT0 = time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)

// propIDs are the identities a scenario draws from: u0..u4 may be listed
// approvers, x never is, e is added by the escalation tier, and "" is a vote
// without an approver (malformed) or a request without requester or owner.
var propIDs = []string{"u0", "u1", "u2", "u3", "u4", "x", "e", ""}

const (
	iU0 = iota
	iU1
	iU2
	iU3
	iU4
	iX
	iE
	iNone
)

// propArgs are the arguments votes may propose; propArgs[0] is the
// request's. propArgs[1] is the same object written differently (same RFC
// 8785 hash); the last three are no JSON object.
var propArgs = []json.RawMessage{
	json.RawMessage(`{"amount":100,"currency":"eur"}`),
	json.RawMessage(`{ "currency": "eur", "amount": 100.0 }`),
	json.RawMessage(`{"amount":80,"currency":"eur"}`),
	json.RawMessage(`{"amount":80,"currency":"eur","note":"partial \u00e9"}`),
	json.RawMessage(`{"amount":1,"meta":{"a":[1,2,{"b":null}],"z":1e21}}`),
	json.RawMessage(`[1,2]`),
	json.RawMessage(`null`),
	nil,
}

// Decisions a vote op can carry, by (byte % 8); "maybe" is unknown.
var propDecisions = []string{
	contracts.DecisionApprove, contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit,
	contracts.DecisionEdit, contracts.DecisionRespond, contracts.DecisionAnswer, "maybe",
}

const (
	dApprove = 0
	dReject  = 2
	dEdit    = 3
	dRespond = 5
	dAnswer  = 6
	dUnknown = 7
)

// Decisions a request may allow, by bit of the allowed-decisions byte.
var propAllowable = []string{
	contracts.DecisionApprove, contracts.DecisionReject, contracts.DecisionEdit,
	contracts.DecisionRespond, contracts.DecisionAnswer,
}

// Header flags.
const (
	fVeto            = 1 << 0
	fAllowSelf       = 1 << 1
	fTimeoutApprove  = 1 << 2
	fEscalationTier  = 1 << 3
	fEscalated       = 1 << 4
	fRoundTrip       = 1 << 5 // carry the record forward through JSON, as the arbiter does
	fPrefillRefusals = 1<<6 | 1<<7
)

// Allowed-decisions byte: bits 0-4 select propAllowable, aAll allows every
// decision (an empty list), aHumanInput makes the request a human_input one.
const (
	aApprove    = 1 << 0
	aReject     = 1 << 1
	aEdit       = 1 << 2
	aRespond    = 1 << 3
	aAnswer     = 1 << 4
	aAll        = 1 << 5
	aHumanInput = 0b11 << 6
)

// Op kinds, the low nibble of an op's first byte; the high nibble is the
// minutes that pass before it.
const (
	opVoteMax  = 9 // kinds 0..9 are votes
	opClaim    = 10
	opCancel   = 11 // a cancel if its byte is < 32, else a claim
	opExtend   = 12
	opExpire   = 13
	opEscalate = 14
	opJump     = 15
)

// Argument hash a vote carries.
const (
	shaNone      = 0
	shaCurrent   = 1 // the arguments under review: never stale
	shaRequested = 2 // stale once an edit changed the arguments
	shaOfArgs    = 3 // the hash of the vote's own propArgs entry
)

type propConfig struct {
	required         int
	toolSchema       bool
	approvers        []string
	veto             bool
	allowSelf        bool
	onTimeoutApprove bool
	humanInput       bool
	escalationTier   bool
	escalated        bool
	prefill          bool
	roundTrip        bool
	requester, owner string
	allowed          []string
	expiresIn        time.Duration
}

type propOp struct {
	kind int
	dt   time.Duration
	// votes
	approver   string
	decision   string
	argIdx     int
	shaMode    int
	reuseBack  int // >= 0: reuse the vote id this many ids back
	wrongEvent bool
	answer     *contracts.Answer
	// commands
	arg byte
}

// propReader hands out the fuzz bytes; past the end it gives zeros.
type propReader struct {
	data []byte
	pos  int
}

func (r *propReader) more() bool { return r.pos < len(r.data) }

func (r *propReader) next() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

// decodeScenario turns bytes into a request configuration and operations.
// Every byte string decodes to some scenario.
func decodeScenario(data []byte) (propConfig, []propOp) {
	r := &propReader{data: data}
	var c propConfig
	b := r.next()
	c.required = int(b&0x7f) % 5 // 0 is an unset quorum: one approval
	c.toolSchema = b&0x80 != 0
	mask := r.next() & 0x1f
	for i := range 5 {
		if mask&(1<<i) != 0 {
			c.approvers = append(c.approvers, propIDs[i])
		}
	}
	flags := r.next()
	c.veto = flags&fVeto != 0
	c.allowSelf = flags&fAllowSelf != 0
	c.onTimeoutApprove = flags&fTimeoutApprove != 0
	c.escalationTier = flags&fEscalationTier != 0
	c.escalated = c.escalationTier && flags&fEscalated != 0
	c.prefill = flags&fPrefillRefusals == fPrefillRefusals
	c.roundTrip = flags&fRoundTrip != 0
	c.requester = propIDs[r.next()%8]
	c.owner = propIDs[r.next()%8]
	allowed := r.next()
	c.humanInput = allowed&aHumanInput == aHumanInput
	if allowed&aAll == 0 {
		c.allowed = []string{}
		for i, d := range propAllowable {
			if allowed&(1<<i) != 0 {
				c.allowed = append(c.allowed, d)
			}
		}
	}
	c.expiresIn = time.Duration(1+int(r.next()%120)) * time.Minute

	var ops []propOp
	for r.more() && len(ops) < propMaxOps {
		b := r.next()
		op := propOp{kind: int(b & 0x0f), dt: time.Duration(b>>4) * time.Minute, reuseBack: -1}
		switch {
		case op.kind <= opVoteMax:
			a, d, x := r.next(), r.next(), r.next()
			op.approver = propIDs[a%8]
			op.wrongEvent = a>>3 == 31
			op.decision = propDecisions[d%8]
			if (d>>3)&3 == 3 {
				op.reuseBack = int(d >> 5)
			}
			op.argIdx = int(x % 8)
			op.shaMode = int(x>>3) % 4
			switch action := int(x>>5) % 4; {
			case action < 3:
				op.answer = &contracts.Answer{
					Action: []string{"accept", "decline", "cancel"}[action], Content: propArgs[op.argIdx],
				}
			case op.argIdx%2 == 1:
				op.answer = &contracts.Answer{Action: "maybe"}
			}
		case op.kind == opJump:
			op.dt = time.Duration(b>>4+1) * 8 * time.Minute
		case op.kind == opExpire || op.kind == opEscalate:
		default:
			op.arg = r.next()
		}
		ops = append(ops, op)
	}
	return c, ops
}

func (c propConfig) request(t testing.TB) contracts.ApprovalRequested {
	req := contracts.ApprovalRequested{
		Spec:    contracts.SpecApprovalRequested,
		EventID: propEventID,
		Kind:    contracts.KindToolApproval,
		Run: contracts.Run{
			ID: "run-1", Agent: "billing", RequestedBy: c.requester, Owner: c.owner, Tenant: "acme",
		},
		ToolCall: &contracts.ToolCall{
			ID: "call-1", Name: "stripe.refund",
			Arguments: propArgs[0], ArgumentsSHA256: propSHA(t, propArgs[0]),
		},
		Risk:    contracts.RiskHigh,
		Summary: "billing wants to call stripe.refund",
		Policy:  contracts.PolicyRef{Rule: "refunds", Version: "v1"},
		Quorum: contracts.Quorum{
			Required: c.required, Approvers: slices.Clone(c.approvers), Veto: c.veto,
			AllowSelfApproval: c.allowSelf, Order: contracts.OrderAny,
		},
		Escalation:       []contracts.EscalationTier{},
		Reminders:        []string{},
		AllowedDecisions: c.allowed,
		Channels:         []string{"web"},
		ExpiresAt:        propT0.Add(c.expiresIn),
		OnTimeout:        contracts.OnTimeoutReject,
		CreatedAt:        propT0,
	}
	if req.Quorum.Approvers == nil {
		req.Quorum.Approvers = []string{}
	}
	if req.AllowedDecisions == nil {
		req.AllowedDecisions = []string{}
	}
	if c.onTimeoutApprove {
		req.OnTimeout = contracts.OnTimeoutApprove
	}
	if c.escalationTier {
		req.Escalation = []contracts.EscalationTier{{After: "30m", Approvers: []string{"e", "u4"}}}
	}
	if c.toolSchema {
		req.ToolSchema = propToolSchema
	}
	if c.humanInput {
		req.Spec = contracts.SpecHumanInputRequested
		req.ToolSchema = nil
		req.Kind = contracts.KindHumanInput
		req.ToolCall = nil
		req.Question = &contracts.Question{Text: "Which cost centre?", Schema: propQuestionSchema}
	}
	return req
}

var propSHACache = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// propSHA is the RFC 8785 hash of args, "" when they cannot be hashed. The
// few distinct arguments of these tests are hashed once.
func propSHA(t testing.TB, args json.RawMessage) string {
	t.Helper()
	c := &propSHACache
	c.Lock()
	defer c.Unlock()
	if sha, ok := c.m[string(args)]; ok {
		return sha
	}
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		sha = ""
	}
	if len(c.m) < 64 {
		c.m[string(args)] = sha
	}
	return sha
}

// propRun applies one scenario and checks every step.
type propRun struct {
	t         testing.TB
	data      []byte
	cfg       propConfig
	req       contracts.ApprovalRequested
	reqJSON   []byte
	reqSHA    string
	rec       contracts.Record
	now       time.Time
	voteIDs   []string // every vote id applied so far, in order
	fresh     int
	refusals  int // refused votes recorded so far (kept or omitted)
	decisions int // steps that made the record terminal
	log       []string
	stats     map[string]int // what the scenarios reached, when not nil
	// roster is the live directory the scenario is judged by (nil: none;
	// see propRoster).
	roster *approval.Roster
}

// propRoster is the directory of scenarios run with one: u0, u3, x and e
// decide within tenant acme, u1 within every tenant, u2 only within globex
// (wrong_tenant), u4 was removed (unknown_approver), and adm is an admin of
// acme. Votes name people in other spellings too (see voteFor), which the
// directory maps to these ids.
var propRoster = approval.NewRoster(contracts.Directory{Spec: contracts.SpecDirectory, Version: "prop", People: []contracts.DirectoryPerson{
	{ID: "u0", Tenants: []string{"acme"}, Roles: []string{"approver"}},
	{ID: "u1", Roles: []string{"approver"}},
	{ID: "u2", Tenants: []string{"globex"}, Roles: []string{"approver"}},
	{ID: "u3", Email: "u3@example.com", Tenants: []string{"acme"}, Roles: []string{"approver"}},
	{ID: "x", Tenants: []string{"acme"}, Roles: []string{"agent", "approver"}},
	{ID: "e", Tenants: []string{"acme"}, Roles: []string{"approver"}},
	{ID: "adm", Tenants: []string{"acme"}, Roles: []string{"admin"}},
}})

// canon is the id the scenario's directory gives name: the directory's id
// for a listed person, else name itself.
func (r *propRun) canon(name string) string {
	if p, ok := r.roster.Find(name); ok {
		return p.ID
	}
	return name
}

var voteReasons = []string{
	contracts.ReasonNotAnApprover, contracts.ReasonSelfApproval, contracts.ReasonDuplicateVote,
	contracts.ReasonClosed, contracts.ReasonStaleArguments, contracts.ReasonInvalidArguments,
	contracts.ReasonDecisionNotAllowed, contracts.ReasonUnknownEvent, contracts.ReasonMalformed,
	contracts.ReasonUnknownApprover, contracts.ReasonWrongTenant,
}

var commandReasons = []string{
	contracts.ReasonAlreadyClaimed, contracts.ReasonNotApproved, contracts.ReasonNotPermitted,
	contracts.ReasonUnknownApprover, contracts.ReasonDeadlineNotLater, contracts.ReasonApprovalLapsed,
}

var statuses = []string{
	contracts.StatusPending, contracts.StatusApproved, contracts.StatusRejected, contracts.StatusResponded,
	contracts.StatusAnswered, contracts.StatusExpired, contracts.StatusCancelled,
}

// runScenario decodes data and checks the state machine over it; it
// returns the final record.
func runScenario(t testing.TB, data []byte) contracts.Record {
	t.Helper()
	return runScenarioStats(t, data, nil)
}

func runScenarioStats(t testing.TB, data []byte, stats map[string]int) contracts.Record {
	t.Helper()
	return runScenarioWith(t, data, stats, nil)
}

// runScenarioWith runs a scenario judged by the directory roster (nil: none).
func runScenarioWith(t testing.TB, data []byte, stats map[string]int, roster *approval.Roster) contracts.Record {
	t.Helper()
	cfg, ops := decodeScenario(data)
	r := &propRun{t: t, data: data, cfg: cfg, req: cfg.request(t), now: propT0, stats: stats, roster: roster}
	if roster != nil {
		r.logf("judged by the directory %s", roster.Version())
	}
	if r.req.ToolCall != nil {
		r.reqSHA = r.req.ToolCall.ArgumentsSHA256
	}
	r.reqJSON = mustJSON(t, r.req)
	r.rec = approval.NewRecord(r.req, propT0)
	r.logf("request: tool_schema=%v quorum %d of %v veto=%v self=%v on_timeout=%s kind=%s requester=%q owner=%q allowed=%v escalation=%v expires=+%s",
		cfg.toolSchema, cfg.required, cfg.approvers, cfg.veto, cfg.allowSelf, r.req.OnTimeout, r.req.Kind, cfg.requester, cfg.owner,
		cfg.allowed, cfg.escalationTier, cfg.expiresIn)
	if cfg.escalated {
		r.rec.EscalationLevel = 1
	}
	if cfg.prefill {
		for i := range propPrefill {
			v := contracts.Vote{
				Spec: contracts.SpecVote, VoteID: fmt.Sprintf("p%03d", i), EventID: "another-event",
				Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: "x", Via: contracts.ViaNATS},
				DecidedAt: propT0,
			}
			// Applied without the per-step checks, which would dominate
			// the run time; the invariants are checked on the result.
			res := approval.ApplyVote(r.rec, v, propT0)
			if res.Refusal != contracts.ReasonMalformed || !res.Changed {
				r.fatalf("prefill vote %s: %+v", v.VoteID, flags(res))
			}
			r.rec = res.Record
			r.refusals++
			r.voteIDs = append(r.voteIDs, v.VoteID)
		}
		r.logf("%d refused votes recorded", propPrefill)
	}
	r.check(r.rec, r.rec, approval.Result{}, "start")
	for _, op := range ops {
		r.now = r.now.Add(op.dt)
		switch op.kind {
		case opClaim, opCancel:
			if op.kind == opCancel && op.arg < 32 {
				r.command(contracts.Command{
					Spec: contracts.SpecCommand, CommandID: []string{"k0", "k1"}[op.arg%2], EventID: propEventID,
					Command: contracts.CommandCancel, By: propIDs[int(op.arg>>1)%7],
				})
				break
			}
			// The run's agent (the library gate that published it) may
			// claim; so may an admin; anyone else is not permitted.
			r.command(contracts.Command{
				Spec: contracts.SpecCommand, CommandID: fmt.Sprintf("claim-%d", len(r.log)), EventID: propEventID,
				Command: contracts.CommandClaim, By: []string{"billing", "billing", "adm", "runner"}[(op.arg>>1)%4],
				ClaimID: []string{"c0", "c1"}[op.arg%2],
			})
		case opExtend:
			until := r.rec.ExpiresAt
			if op.arg != 255 {
				until = r.now.Add(time.Duration(int(op.arg%64)-8) * time.Minute)
			}
			r.command(contracts.Command{
				Spec: contracts.SpecCommand, CommandID: fmt.Sprintf("extend-%d", len(r.log)), EventID: propEventID,
				Command: contracts.CommandExtend, By: []string{"u0", "adm", "x", "u1"}[op.arg>>6], Until: until,
			})
		case opExpire:
			r.expire()
		case opEscalate:
			r.escalate()
		case opJump:
			r.logf("%s: time passes", r.clock())
		default:
			r.vote(r.voteFor(op))
		}
	}
	return r.rec
}

func (r *propRun) clock() string { return "+" + r.now.Sub(propT0).String() }

func (r *propRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *propRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nscenario (fuzz input %x):\n  %s\nrecord before this step: %s",
		fmt.Sprintf(format, args...), r.data, strings.Join(r.log, "\n  "), mustJSON(r.t, r.rec))
}

// voteFor builds the vote an op describes against the current record.
func (r *propRun) voteFor(op propOp) contracts.Vote {
	id := ""
	if op.reuseBack >= 0 && len(r.voteIDs) > 0 {
		id = r.voteIDs[len(r.voteIDs)-1-op.reuseBack%len(r.voteIDs)]
	} else {
		r.fresh++
		id = fmt.Sprintf("v%02d", r.fresh)
	}
	approver := op.approver
	if r.roster != nil && r.fresh%3 == 0 {
		// The same people in other spellings: what a resolver may send.
		approver = map[string]string{"u0": "U0", "u1": "ｕ1", "u3": "u3@example.com", "x": " X", "e": "e\u200d"}[approver] + map[bool]string{true: approver}[approver == "u2" || approver == "u4" || approver == ""]
	}
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: id, EventID: propEventID, Decision: op.decision,
		Approver: contracts.Approver{ID: approver, Via: contracts.ViaWeb},
		Comment:  "comment of " + id, DecidedAt: r.now,
	}
	if op.wrongEvent {
		v.EventID = "another-event"
	}
	switch op.decision {
	case contracts.DecisionEdit:
		v.Arguments = propArgs[op.argIdx]
	case contracts.DecisionAnswer:
		v.Answer = op.answer
	}
	switch op.shaMode {
	case shaCurrent:
		v.ArgumentsSHA256 = modelCurrentSHA(r.t, r.rec, r.reqSHA)
	case shaRequested:
		v.ArgumentsSHA256 = r.reqSHA
		if v.ArgumentsSHA256 == "" {
			v.ArgumentsSHA256 = propSHA(r.t, propArgs[0])
		}
	case shaOfArgs:
		v.ArgumentsSHA256 = propSHA(r.t, propArgs[op.argIdx])
		if v.ArgumentsSHA256 == "" {
			v.ArgumentsSHA256 = strings.Repeat("0", 64)
		}
	}
	return v
}

// apply runs f on the current record and checks what every transition
// must respect: purity (the input is not mutated, the same input gives the
// same result, the result shares no writable memory with the input, the
// stored JSON form of the record gives the same result) and the
// record-level invariants.
func (r *propRun) apply(what string, f func(contracts.Record) approval.Result) (prev, next contracts.Record, res approval.Result) {
	r.t.Helper()
	prev = r.rec
	before := mustJSON(r.t, prev)
	res = f(prev)
	again := f(prev)
	if !reflect.DeepEqual(res, again) {
		r.fatalf("%s is not deterministic:\n%s\n%s", what, resultJSON(r.t, res), resultJSON(r.t, again))
	}
	// Writing to one result must change neither the input nor another result.
	propScribble(&again.Record)
	if after := mustJSON(r.t, prev); !bytes.Equal(before, after) {
		r.fatalf("%s mutated its input record, or its result shares memory with it\nbefore: %s\nafter:  %s",
			what, before, after)
	}
	if !reflect.DeepEqual(res, f(prev)) {
		r.fatalf("two results of %s share memory", what)
	}
	if !r.cfg.roundTrip {
		// The arbiter applies transitions to the record as read from the
		// bucket; with roundTrip every record already is in that form.
		var stored contracts.Record
		if err := json.Unmarshal(before, &stored); err != nil {
			r.fatalf("record does not decode: %v", err)
		}
		if got, g := resultJSON(r.t, res), resultJSON(r.t, f(stored)); !bytes.Equal(got, g) {
			r.fatalf("%s gives another result on the record read back from JSON:\n%s\n%s", what, got, g)
		}
	}
	next = prev
	if res.Changed {
		next = res.Record
	}
	r.logf("%s: %s → changed=%v decided=%v duplicate=%v refusal=%q status=%s",
		r.clock(), what, res.Changed, res.Decided, res.Duplicate, res.Refusal, next.Status)
	r.check(prev, next, res, what)
	r.count(prev, next, res)
	r.rec = next
	if r.cfg.roundTrip {
		r.rec = roundTrip(r.t, next)
	}
	return prev, next, res
}

func (r *propRun) vote(v contracts.Vote) {
	r.t.Helper()
	vBefore := mustJSON(r.t, v)
	what := fmt.Sprintf("vote %s %s by %q args=%s sha=%.8s event=%.8s", v.VoteID, v.Decision, v.Approver.ID,
		v.Arguments, v.ArgumentsSHA256, v.EventID)
	if v.Answer != nil {
		what += fmt.Sprintf(" answer=%s", v.Answer.Action)
	}
	// What the model says before the vote is applied.
	retained := slices.ContainsFunc(r.rec.Votes, func(o contracts.Vote) bool { return o.VoteID == v.VoteID }) ||
		slices.ContainsFunc(r.rec.RefusedVotes, func(o contracts.RefusedVote) bool { return o.VoteID == v.VoteID })
	reasons := r.modelReasons(r.rec, v)
	prev, next, res := r.apply(what, func(rec contracts.Record) approval.Result {
		if r.roster != nil {
			return approval.ApplyVoteBy(rec, v, r.now, r.roster)
		}
		return approval.ApplyVote(rec, v, r.now)
	})
	if !bytes.Equal(vBefore, mustJSON(r.t, v)) {
		r.fatalf("ApplyVote mutated the vote")
	}
	r.voteIDs = append(r.voteIDs, v.VoteID)
	q := r.req.Quorum

	// A vote id applied before (and still in the record) is a no-op.
	if retained {
		if !res.Duplicate || res.Changed || res.Refusal != "" {
			r.fatalf("vote id %s was applied before: want a duplicate no-op, got %+v", v.VoteID, flags(res))
		}
		return
	}
	if res.Duplicate || !res.Changed {
		r.fatalf("a new vote id must be counted or recorded as refused, got %+v", flags(res))
	}

	if res.Refusal != "" {
		r.refusals++
		if !slices.Contains(reasons, res.Refusal) {
			r.fatalf("refused with %q; the reasons that apply are %v", res.Refusal, reasons)
		}
		var last contracts.RefusedVote
		if n := len(next.RefusedVotes); n > 0 {
			last = next.RefusedVotes[n-1]
			last.Detail = "" // free text for people
		}
		counted := v.Approver
		if res.Refusal != contracts.ReasonUnknownApprover {
			counted.ID = r.canon(counted.ID)
		}
		if !reflect.DeepEqual(last, contracts.RefusedVote{
			VoteID: v.VoteID, Approver: counted, Decision: v.Decision, Reason: res.Refusal, At: r.now,
		}) {
			r.fatalf("the refused vote is not recorded last: %+v", next.RefusedVotes)
		}
		if !reflect.DeepEqual(prev.Votes, next.Votes) || prev.Status != next.Status || !reflect.DeepEqual(prev.Outcome, next.Outcome) {
			r.fatalf("a refused vote changed the votes, status or outcome")
		}
		return
	}

	// Counted.
	if len(reasons) > 0 {
		r.fatalf("vote counted although %v apply", reasons)
	}
	// Counted under the directory's id for the approver.
	v.Approver.ID = r.canon(v.Approver.ID)
	if len(next.Votes) != len(prev.Votes)+1 || !reflect.DeepEqual(next.Votes[len(next.Votes)-1], v) {
		r.fatalf("a counted vote must be appended as it came: %d → %d votes\n%#v\n%#v", len(prev.Votes), len(next.Votes), next.Votes[len(next.Votes)-1], v)
	}
	if len(next.RefusedVotes) != len(prev.RefusedVotes) {
		r.fatalf("a counted vote changed the refused votes")
	}
	switch v.Decision {
	case contracts.DecisionReject:
		if q.Veto && (next.Status != contracts.StatusRejected || !res.Decided) {
			r.fatalf("with veto a counted reject must decide rejected at once, status %s", next.Status)
		}
		if next.Status == contracts.StatusRejected {
			if !slices.Equal(next.Outcome.DecidedBy, []string{v.Approver.ID}) || next.Outcome.Reason != v.Comment {
				r.fatalf("rejected outcome %+v, want decided by %s with the comment as reason", next.Outcome, v.Approver.ID)
			}
		}
	case contracts.DecisionRespond:
		if next.Status != contracts.StatusResponded || !slices.Equal(next.Outcome.DecidedBy, []string{v.Approver.ID}) ||
			next.Outcome.Comment != v.Comment || len(next.Outcome.Arguments) != 0 {
			r.fatalf("a counted respond must decide responded with the comment and no arguments: %s %+v", next.Status, next.Outcome)
		}
	case contracts.DecisionAnswer:
		if next.Status != contracts.StatusAnswered || !slices.Equal(next.Outcome.DecidedBy, []string{v.Approver.ID}) ||
			!sameJSON(r.t, next.Outcome.Arguments, v.Answer.Content) {
			r.fatalf("a counted answer must decide answered with its content: %s %+v", next.Status, next.Outcome)
		}
	case contracts.DecisionApprove, contracts.DecisionEdit:
		if next.Status != contracts.StatusPending && next.Status != contracts.StatusApproved {
			r.fatalf("an approval made the record %s", next.Status)
		}
	}
}

func (r *propRun) command(c contracts.Command) {
	r.t.Helper()
	what := fmt.Sprintf("command %s %s", c.Command, c.CommandID)
	switch c.Command {
	case contracts.CommandClaim:
		what += " claim_id=" + c.ClaimID
	case contracts.CommandCancel:
		what += " by " + c.By
	case contracts.CommandExtend:
		what += " until +" + c.Until.Sub(propT0).String()
	}
	what += " by " + c.By
	prev, next, res := r.apply(what, func(rec contracts.Record) approval.Result {
		return approval.ApplyCommandAs(rec, c, r.now, r.roster)
	})
	permitted := r.modelPermitted(prev, c)
	switch c.Command {
	case contracts.CommandClaim:
		lapsed := prev.Status == contracts.StatusApproved &&
			(prev.LapsedAt != nil || r.now.After(prev.Outcome.DecidedAt.Add(contracts.DefaultClaimWithin)))
		switch {
		case prev.Claim != nil && prev.Claim.ClaimID == c.ClaimID:
			if !res.Duplicate || res.Changed {
				r.fatalf("the same claim again must be a duplicate no-op: %+v", flags(res))
			}
		case prev.Claim != nil:
			if res.Refusal != contracts.ReasonAlreadyClaimed || res.Changed {
				r.fatalf("a second claim must be refused already_claimed without a write: %+v", flags(res))
			}
		case !permitted:
			if res.Refusal != contracts.ReasonNotPermitted || res.Changed {
				r.fatalf("a claim by %s, neither the submitting agent nor an admin, must be refused not_permitted without a write: %+v", c.By, flags(res))
			}
		case lapsed:
			if res.Refusal != contracts.ReasonApprovalLapsed || res.Changed != (prev.LapsedAt == nil) || next.Claim != nil ||
				res.Changed && (next.LapsedAt == nil || !next.LapsedAt.Equal(r.now) || next.Status != contracts.StatusApproved) {
				r.fatalf("a claim %s after the approval must be refused approval_lapsed, marking the record once: %+v lapsed_at %v",
					r.now.Sub(prev.Outcome.DecidedAt), flags(res), next.LapsedAt)
			}
		case prev.Status != contracts.StatusApproved:
			if res.Refusal != contracts.ReasonNotApproved || res.Changed {
				r.fatalf("a claim of a %s record must be refused not_approved without a write: %+v", prev.Status, flags(res))
			}
		default:
			if !res.Changed || res.Decided || res.Refusal != "" || next.Claim == nil ||
				next.Claim.ClaimID != c.ClaimID || !next.Claim.At.Equal(r.now) {
				r.fatalf("the first claim of an approved record must be recorded: %+v claim %+v", flags(res), next.Claim)
			}
		}
	case contracts.CommandCancel:
		switch {
		case prev.Status == contracts.StatusPending && !permitted:
			if res.Refusal != contracts.ReasonNotPermitted && res.Refusal != contracts.ReasonUnknownApprover || res.Changed {
				r.fatalf("cancel by %s, who is no admin, approver, requester, owner or agent of it, must be refused: %+v", c.By, flags(res))
			}
		case prev.Status == contracts.StatusPending:
			if !res.Decided || next.Status != contracts.StatusCancelled || !slices.Equal(next.Outcome.DecidedBy, []string{c.By}) {
				r.fatalf("cancel of a pending record must decide cancelled by %s: %+v %s", c.By, flags(res), next.Status)
			}
		case prev.Status == contracts.StatusCancelled && prev.Outcome.Reason == "cancel:"+c.CommandID:
			if !res.Duplicate || res.Changed {
				r.fatalf("the same cancel again must be a duplicate no-op: %+v", flags(res))
			}
		default:
			if res.Refusal != contracts.ReasonClosed || res.Changed {
				r.fatalf("cancel of a %s record must be refused closed: %+v", prev.Status, flags(res))
			}
		}
	case contracts.CommandExtend:
		switch {
		case prev.Status != contracts.StatusPending:
			if res.Refusal != contracts.ReasonClosed || res.Changed {
				r.fatalf("extend of a %s record must be refused closed: %+v", prev.Status, flags(res))
			}
		case !c.Until.After(r.now):
			if res.Refusal == "" || res.Changed {
				r.fatalf("extend into the past must be refused: %+v", flags(res))
			}
		case c.Until.Equal(prev.ExpiresAt):
			if !res.Duplicate || res.Changed {
				r.fatalf("extend to the current deadline must be a duplicate no-op: %+v", flags(res))
			}
		case !permitted:
			if res.Refusal != contracts.ReasonNotPermitted && res.Refusal != contracts.ReasonUnknownApprover || res.Changed {
				r.fatalf("extend by %s, who is no admin or approver of it, must be refused: %+v", c.By, flags(res))
			}
		case !c.Until.After(prev.ExpiresAt):
			if res.Refusal != contracts.ReasonDeadlineNotLater || res.Changed {
				r.fatalf("extend to %s, before the deadline %s, must be refused deadline_not_later: %+v",
					c.Until.Sub(propT0), prev.ExpiresAt.Sub(propT0), flags(res))
			}
		default:
			if !res.Changed || res.Decided || res.Refusal != "" || !next.ExpiresAt.Equal(c.Until) {
				r.fatalf("extend must move expires_at to %s: %+v, expires_at %s", c.Until, flags(res), next.ExpiresAt)
			}
		}
		if next.ExpiresAt.Before(prev.ExpiresAt) {
			r.fatalf("a deadline never moves earlier: %s → %s", prev.ExpiresAt.Sub(propT0), next.ExpiresAt.Sub(propT0))
		}
	}
}

// modelPermitted is who may give c on rec (DESIGN §5, "Commands are
// checked against their issuer"): extend, an admin of the request's tenant
// or an approver of it (escalation tiers reached included); cancel, those
// and its requester, owner and agent; claim, its agent or an admin. With a
// directory an admin or approver must be listed and within the tenant.
func (r *propRun) modelPermitted(rec contracts.Record, c contracts.Command) bool {
	req := rec.Request
	id := r.canon(c.By)
	inTenant, admin := true, false
	if r.roster != nil {
		p, ok := r.roster.Find(c.By)
		inTenant = ok && (len(p.Tenants) == 0 || slices.Contains(p.Tenants, req.Run.Tenant))
		admin = inTenant && slices.Contains(p.Roles, "admin")
	}
	approver := inTenant && (len(req.Quorum.Approvers) == 0 || slices.Contains(req.Quorum.Approvers, id))
	for _, tier := range req.Escalation[:min(rec.EscalationLevel, len(req.Escalation))] {
		approver = approver || inTenant && slices.Contains(tier.Approvers, id)
	}
	agent := c.By == req.Run.Agent
	switch c.Command {
	case contracts.CommandExtend:
		return admin || approver
	case contracts.CommandCancel:
		self := id != "" && (id == r.canon(req.Run.RequestedBy) || id == r.canon(req.Run.Owner))
		return admin || approver || self || agent
	case contracts.CommandClaim:
		return admin || agent
	}
	return true
}

func (r *propRun) expire() {
	r.t.Helper()
	prev, next, res := r.apply("timer fires", func(rec contracts.Record) approval.Result { return approval.Expire(rec, r.now) })
	if prev.Status != contracts.StatusPending || r.now.Before(prev.ExpiresAt) {
		if res.Changed || res.Decided {
			r.fatalf("a timer fire before the deadline (%s) or after the decision must change nothing: %+v",
				prev.ExpiresAt.Sub(propT0), flags(res))
		}
		return
	}
	want := contracts.StatusExpired
	if r.req.OnTimeout == contracts.OnTimeoutApprove && r.req.Kind == contracts.KindToolApproval {
		want = contracts.StatusApproved
	}
	if !res.Decided || next.Status != want || !slices.Equal(next.Outcome.DecidedBy, []string{contracts.DecidedByTimeout}) {
		r.fatalf("a due timer must decide %s by timeout: %+v %s %+v", want, flags(res), next.Status, next.Outcome)
	}
}

// escalate reaches the next escalation tier, as the arbiter's escalation
// timer would; it is not a transition of the machine under test.
func (r *propRun) escalate() {
	if r.rec.Status != contracts.StatusPending || r.rec.EscalationLevel >= len(r.req.Escalation) {
		r.logf("%s: escalation timer: nothing to do", r.clock())
		return
	}
	r.rec.EscalationLevel++ // a field of this run's own copy of the record
	r.logf("%s: escalation level %d", r.clock(), r.rec.EscalationLevel)
}

// check asserts the invariants of one step from prev to next.
func (r *propRun) check(prev, next contracts.Record, res approval.Result, what string) {
	r.t.Helper()
	q := r.req.Quorum
	need := max(1, q.Required)

	if res.Changed && res.Duplicate || res.Duplicate && (res.Refusal != "" || res.Decided) || res.Decided && !res.Changed {
		r.fatalf("%s: inconsistent result flags %+v", what, flags(res))
	}
	if !slices.Contains(statuses, next.Status) {
		r.fatalf("%s: unknown status %q", what, next.Status)
	}
	if next.Spec != contracts.SpecRecord || !bytes.Equal(mustJSON(r.t, next.Request), r.reqJSON) {
		r.fatalf("%s: the request snapshot or spec changed", what)
	}
	if res.Changed && !next.UpdatedAt.Equal(r.now) {
		r.fatalf("%s: updated_at %s, want now", what, next.UpdatedAt)
	}

	// At most one terminal transition; nothing but a claim after it.
	terminalNow := next.Status != contracts.StatusPending
	if res.Decided != (prev.Status == contracts.StatusPending && terminalNow) {
		r.fatalf("%s: decided=%v but status %s → %s", what, res.Decided, prev.Status, next.Status)
	}
	if res.Decided {
		r.decisions++
		if r.decisions > 1 {
			r.fatalf("%s: a second terminal transition", what)
		}
		if !next.Outcome.DecidedAt.Equal(r.now) {
			r.fatalf("%s: decided_at %s, want now", what, next.Outcome.DecidedAt)
		}
	}
	if prev.Status != contracts.StatusPending {
		if next.Status != prev.Status || !reflect.DeepEqual(next.Outcome, prev.Outcome) || !reflect.DeepEqual(next.Votes, prev.Votes) ||
			!next.ExpiresAt.Equal(prev.ExpiresAt) {
			r.fatalf("%s: a terminal record changed its status, outcome, votes or deadline", what)
		}
		if prev.Claim != nil && !reflect.DeepEqual(prev.Claim, next.Claim) {
			r.fatalf("%s: the claim changed", what)
		}
	}
	if next.Claim != nil && next.Status != contracts.StatusApproved {
		r.fatalf("%s: a %s record has a claim", what, next.Status)
	}
	if !terminalNow {
		if next.Outcome != nil || next.Claim != nil {
			r.fatalf("%s: a pending record has an outcome or claim", what)
		}
	} else {
		if next.Outcome == nil || len(next.Outcome.DecidedBy) == 0 {
			r.fatalf("%s: a %s record without outcome or decided_by", what, next.Status)
		}
		want := map[string][]string{
			contracts.StatusApproved:  {contracts.DecisionApprove, contracts.DecisionEdit},
			contracts.StatusRejected:  {contracts.DecisionReject},
			contracts.StatusResponded: {contracts.DecisionRespond},
			contracts.StatusAnswered:  {contracts.DecisionAnswer},
			contracts.StatusExpired:   {contracts.DecisionReject},
			contracts.StatusCancelled: {contracts.CommandCancel},
		}[next.Status]
		if !slices.Contains(want, next.Outcome.Decision) {
			r.fatalf("%s: status %s with outcome decision %q", what, next.Status, next.Outcome.Decision)
		}
	}

	// Votes: append-only, one per vote id and one per approver, each one
	// that counts allowed to count.
	if len(next.Votes) < len(prev.Votes) || len(next.Votes) > len(prev.Votes)+1 ||
		!reflect.DeepEqual(next.Votes[:len(prev.Votes)], prev.Votes) {
		r.fatalf("%s: votes are not append-only", what)
	}
	voteIDs, approverIDs := map[string]bool{}, map[string]bool{}
	for _, v := range next.Votes {
		if voteIDs[v.VoteID] || approverIDs[v.Approver.ID] {
			r.fatalf("%s: vote id %s or approver %s counted twice", what, v.VoteID, v.Approver.ID)
		}
		voteIDs[v.VoteID], approverIDs[v.Approver.ID] = true, true
		if isApproving(v.Decision) && !q.AllowSelfApproval && r.isSelf(v.Approver.ID) {
			r.fatalf("%s: counted %s by the requester or owner %s without allow_self_approval", what, v.Decision, v.Approver.ID)
		}
	}

	// Refused votes: bounded, counted, with contract reasons.
	if len(next.RefusedVotes) > contracts.MaxRefusedVotes {
		r.fatalf("%s: %d refused votes kept, max %d", what, len(next.RefusedVotes), contracts.MaxRefusedVotes)
	}
	if got := len(next.RefusedVotes) + next.RefusedVotesOmitted; got != r.refusals+refusedNow(res) {
		r.fatalf("%s: %d refused votes kept or omitted, %d refused", what, got, r.refusals+refusedNow(res))
	}
	if refusedNow(res) == 1 {
		kept := next.RefusedVotes[:len(next.RefusedVotes)-1]
		if len(kept) > len(prev.RefusedVotes) || !reflect.DeepEqual(kept, prev.RefusedVotes[len(prev.RefusedVotes)-len(kept):]) {
			r.fatalf("%s: refused votes must keep the newest, in order", what)
		}
	} else if !reflect.DeepEqual(next.RefusedVotes, prev.RefusedVotes) || next.RefusedVotesOmitted != prev.RefusedVotesOmitted {
		r.fatalf("%s: refused votes changed without a refusal", what)
	}
	for _, rv := range next.RefusedVotes {
		if !slices.Contains(voteReasons, rv.Reason) {
			r.fatalf("%s: refused vote %s with reason %q, not a vote reason code", what, rv.VoteID, rv.Reason)
		}
	}
	if res.Refusal != "" && !slices.Contains(voteReasons, res.Refusal) && !slices.Contains(commandReasons, res.Refusal) {
		r.fatalf("%s: refusal %q is no contract reason code", what, res.Refusal)
	}

	// Quorum: pending only while the arguments under review lack a quorum;
	// approved only with one (or by an on_timeout: approve timer), never by
	// the requester or owner unless allowed.
	current := modelCurrentSHA(r.t, next, r.reqSHA)
	support := modelSupport(r.t, next, r.reqSHA)
	if !terminalNow && len(support[current]) >= need {
		r.fatalf("%s: pending although %v approved the arguments under review (quorum %d)", what, support[current], need)
	}
	if next.Status == contracts.StatusApproved {
		out := next.Outcome
		if sha := propSHA(r.t, out.Arguments); out.ArgumentsSHA256 == "" || sha != out.ArgumentsSHA256 {
			r.fatalf("%s: approved outcome sha %q does not hash its arguments %s (%q)", what, out.ArgumentsSHA256, out.Arguments, sha)
		}
		if out.ArgumentsSHA256 != current {
			r.fatalf("%s: approved %.12s but the arguments under review are %.12s", what, out.ArgumentsSHA256, current)
		}
		if (len(out.Diff) != 0) != (out.ArgumentsSHA256 != r.reqSHA) {
			r.fatalf("%s: diff %s for arguments %s", what, out.Diff, out.Arguments)
		}
		if slices.Equal(out.DecidedBy, []string{contracts.DecidedByTimeout}) {
			if r.req.OnTimeout != contracts.OnTimeoutApprove {
				r.fatalf("%s: approved by timeout with on_timeout %s", what, r.req.OnTimeout)
			}
		} else {
			by := slices.Sorted(slices.Values(out.DecidedBy))
			want := slices.Sorted(slices.Values(support[current]))
			if len(by) < need || !slices.Equal(by, want) {
				r.fatalf("%s: approved by %v with quorum %d; the distinct approvers of the final arguments are %v",
					what, out.DecidedBy, need, want)
			}
			for _, id := range by {
				if !q.AllowSelfApproval && r.isSelf(id) {
					r.fatalf("%s: approved by the requester or owner %s without allow_self_approval", what, id)
				}
			}
		}
	}
	if next.Status == contracts.StatusRejected && res.Decided && !q.Veto && modelApprovalPossible(next, support[current], need) {
		r.fatalf("%s: rejected without veto while approval was still possible", what)
	}
	if q.Veto && slices.ContainsFunc(next.Votes, func(v contracts.Vote) bool { return v.Decision == contracts.DecisionReject }) &&
		next.Status != contracts.StatusRejected {
		r.fatalf("%s: a counted reject with veto, but status %s", what, next.Status)
	}
}

// count notes what a step reached, to show that the generator explores.
func (r *propRun) count(prev, next contracts.Record, res approval.Result) {
	if r.stats == nil {
		return
	}
	switch {
	case res.Duplicate:
		r.stats["duplicate"]++
	case res.Refusal != "":
		r.stats["refused "+res.Refusal]++
	}
	if !res.Decided {
		return
	}
	out := next.Outcome
	switch {
	case next.Status == contracts.StatusApproved && slices.Equal(out.DecidedBy, []string{contracts.DecidedByTimeout}):
		r.stats["approved by timeout"]++
	case next.Status == contracts.StatusApproved:
		r.stats[fmt.Sprintf("approved by %d", len(out.DecidedBy))]++
		if len(out.Diff) != 0 {
			r.stats["approved edited arguments"]++
		}
		if slices.ContainsFunc(prev.Votes, func(v contracts.Vote) bool { return v.Decision == contracts.DecisionEdit }) &&
			slices.ContainsFunc(prev.Votes, func(v contracts.Vote) bool { return v.Decision == contracts.DecisionApprove }) {
			r.stats["approved after edits and approvals"]++
		}
	case next.Status == contracts.StatusRejected && r.req.Quorum.Veto:
		r.stats["vetoed"]++
		if slices.ContainsFunc(prev.Votes, func(v contracts.Vote) bool { return isApproving(v.Decision) }) {
			r.stats["vetoed after an approval"]++
		}
	case next.Status == contracts.StatusRejected:
		r.stats["rejected without veto"]++
	default:
		r.stats[next.Status]++
	}
}

func refusedNow(res approval.Result) int {
	if res.Refusal != "" && res.Changed && res.Refusal != contracts.ReasonApprovalLapsed {
		return 1
	}
	return 0
}

func (r *propRun) isSelf(id string) bool {
	return id != "" && (id == r.req.Run.RequestedBy || id == r.req.Run.Owner)
}

func isApproving(decision string) bool {
	return decision == contracts.DecisionApprove || decision == contracts.DecisionEdit
}

// modelCurrentSHA is the hash of the arguments under review: the newest
// counted edit's, else the request's.
func modelCurrentSHA(t testing.TB, rec contracts.Record, reqSHA string) string {
	cur := reqSHA
	for _, v := range rec.Votes {
		if v.Decision == contracts.DecisionEdit {
			cur = propSHA(t, v.Arguments)
		}
	}
	return cur
}

// modelSupport maps an arguments hash to the distinct approvers who
// approved exactly those arguments: an approve counts for the arguments
// under review when it was cast, an edit for the arguments it proposes.
func modelSupport(t testing.TB, rec contracts.Record, reqSHA string) map[string][]string {
	support := map[string][]string{}
	cur := reqSHA
	for _, v := range rec.Votes {
		switch v.Decision {
		case contracts.DecisionEdit:
			cur = propSHA(t, v.Arguments)
		case contracts.DecisionApprove:
		default:
			continue
		}
		if !slices.Contains(support[cur], v.Approver.ID) {
			support[cur] = append(support[cur], v.Approver.ID)
		}
	}
	return support
}

// modelApprovalPossible is a generous bound: every listed or escalation
// approver who has not voted yet, and may approve at all, could still approve.
func modelApprovalPossible(rec contracts.Record, support []string, need int) bool {
	q := rec.Request.Quorum
	if len(q.Approvers) == 0 {
		return true
	}
	pool := map[string]bool{}
	for _, id := range q.Approvers {
		pool[id] = true
	}
	for _, tier := range rec.Request.Escalation {
		for _, id := range tier.Approvers {
			pool[id] = true
		}
	}
	for _, v := range rec.Votes {
		delete(pool, v.Approver.ID)
	}
	if !q.AllowSelfApproval {
		// The requester and owner can never cast a counting approval.
		delete(pool, rec.Request.Run.RequestedBy)
		delete(pool, rec.Request.Run.Owner)
	}
	return len(support)+len(pool) >= need
}

// modelReasons lists every refusal reason that applies to v on rec (the
// machine may pick any of them); none means the vote must count.
func (r *propRun) modelReasons(rec contracts.Record, v contracts.Vote) []string {
	t, reqSHA := r.t, r.reqSHA
	req := rec.Request
	var rs []string
	if r.roster != nil && v.Approver.ID != "" {
		p, ok := r.roster.Find(v.Approver.ID)
		switch {
		case !ok:
			rs = append(rs, contracts.ReasonUnknownApprover)
		case len(p.Tenants) > 0 && !slices.Contains(p.Tenants, req.Run.Tenant):
			rs = append(rs, contracts.ReasonWrongTenant)
		}
		v.Approver.ID = r.canon(v.Approver.ID)
	}
	known := slices.Contains(propAllowable, v.Decision)
	if v.Approver.ID == "" || !known || v.EventID != req.EventID {
		rs = append(rs, contracts.ReasonMalformed)
	}
	if rec.Status != contracts.StatusPending {
		rs = append(rs, contracts.ReasonClosed)
	}
	if len(req.AllowedDecisions) > 0 && !slices.Contains(req.AllowedDecisions, v.Decision) ||
		known && (req.Kind == contracts.KindHumanInput) != (v.Decision == contracts.DecisionAnswer) {
		rs = append(rs, contracts.ReasonDecisionNotAllowed)
	}
	if v.ArgumentsSHA256 != "" && v.ArgumentsSHA256 != modelCurrentSHA(t, rec, reqSHA) {
		rs = append(rs, contracts.ReasonStaleArguments)
	}
	eligible := len(req.Quorum.Approvers) == 0 || slices.Contains(req.Quorum.Approvers, v.Approver.ID)
	for _, tier := range req.Escalation[:min(rec.EscalationLevel, len(req.Escalation))] {
		eligible = eligible || slices.Contains(tier.Approvers, v.Approver.ID)
	}
	if !eligible {
		rs = append(rs, contracts.ReasonNotAnApprover)
	}
	if isApproving(v.Decision) && !req.Quorum.AllowSelfApproval && v.Approver.ID != "" &&
		(v.Approver.ID == r.canon(req.Run.RequestedBy) || v.Approver.ID == r.canon(req.Run.Owner)) {
		rs = append(rs, contracts.ReasonSelfApproval)
	}
	if slices.ContainsFunc(rec.Votes, func(o contracts.Vote) bool { return o.Approver.ID == v.Approver.ID }) {
		rs = append(rs, contracts.ReasonDuplicateVote)
	}
	switch v.Decision {
	case contracts.DecisionEdit:
		obj, ok := jsonObject(v.Arguments)
		if !ok || propSHA(t, v.Arguments) == "" || len(req.ToolSchema) > 0 && !propToolSchemaAccepts(obj) {
			rs = append(rs, contracts.ReasonInvalidArguments)
		}
	case contracts.DecisionAnswer:
		if v.Answer == nil || !slices.Contains([]string{"accept", "decline", "cancel"}, v.Answer.Action) {
			rs = append(rs, contracts.ReasonInvalidArguments)
		} else if _, ok := jsonObject(v.Answer.Content); v.Answer.Action == "accept" && req.Question != nil &&
			len(req.Question.Schema) > 0 && !ok {
			// Accepted content must match the question's schema, propQuestionSchema.
			rs = append(rs, contracts.ReasonInvalidArguments)
		}
	}
	return rs
}

// propToolSchema is the tool's JSON Schema when a scenario has one: it
// accepts propArgs[0..3] and refuses propArgs[4] (amount below the minimum,
// no currency). propToolSchemaAccepts is the same rule in Go.
var propToolSchema = json.RawMessage(`{"type":"object","required":["amount","currency"],` +
	`"properties":{"amount":{"type":"number","minimum":10},"currency":{"type":"string"}}}`)

func propToolSchemaAccepts(obj map[string]any) bool {
	amount, ok := obj["amount"].(float64)
	_, hasCurrency := obj["currency"].(string)
	return ok && amount >= 10 && hasCurrency
}

// propQuestionSchema is the schema of a human_input question: an accepted
// answer's content must be a JSON object.
var propQuestionSchema = json.RawMessage(`{"type":"object"}`)

func jsonObject(raw json.RawMessage) (map[string]any, bool) {
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil, false
	}
	return obj, true
}

// propScribble overwrites every part of a record a transition produces. The
// request, raw JSON arguments and decided_by are shared read-only by design
// (a transition never writes them in place), so they are left alone.
func propScribble(rec *contracts.Record) {
	for i := range rec.Votes {
		rec.Votes[i].VoteID = "scribbled"
		rec.Votes[i].Approver.ID = "scribbled"
		rec.Votes[i].Comment = "scribbled"
	}
	for i := range rec.RefusedVotes {
		rec.RefusedVotes[i].Reason = "scribbled"
	}
	if rec.Outcome != nil {
		rec.Outcome.Decision = "scribbled"
		rec.Outcome.Comment = "scribbled"
		rec.Outcome.DecidedAt = time.Time{}
	}
	if rec.Claim != nil {
		rec.Claim.ClaimID = "scribbled"
	}
	rec.Status = "scribbled"
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return data
}

func sameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	return bytes.Equal(mustJSON(t, a), mustJSON(t, b))
}

func resultJSON(t testing.TB, res approval.Result) []byte {
	t.Helper()
	return mustJSON(t, res)
}

func roundTrip(t testing.TB, rec contracts.Record) contracts.Record {
	t.Helper()
	var out contracts.Record
	if err := json.Unmarshal(mustJSON(t, rec), &out); err != nil {
		t.Fatalf("record does not decode: %v", err)
	}
	return out
}

type resultFlags struct {
	Changed, Decided, Duplicate bool
	Refusal                     string
}

func flags(res approval.Result) resultFlags {
	return resultFlags{res.Changed, res.Decided, res.Duplicate, res.Refusal}
}

// Seed encoding: the inverse of decodeScenario for the values used here.

func seedHeader(required int, approvers []int, flags byte, requester, owner int, allowed byte, expiresMin int) []byte {
	var mask byte
	for _, i := range approvers {
		mask |= 1 << i
	}
	return []byte{byte(required), mask, flags, byte(requester), byte(owner), allowed, byte(expiresMin - 1)}
}

func seedVote(dt, approver, decision, argIdx, sha int) []byte {
	return []byte{byte(dt << 4), byte(approver), byte(decision), byte(argIdx | sha<<3)} // low bits of byte 0 and bits 5-7 of byte 3: zero
}

// seedAnswer is an answer vote; action 0..2 is accept, decline, cancel.
func seedAnswer(dt, approver, argIdx, action int) []byte {
	return []byte{byte(dt << 4), byte(approver), dAnswer, byte(argIdx | action<<5)}
}

// seedRevote re-sends the vote id back ids ago with another body.
func seedRevote(dt, back, approver, decision int) []byte {
	return []byte{byte(dt<<4 | 1), byte(approver), byte(decision | 3<<3 | back<<5), 3 << 5}
}

func seedClaim(dt, id int) []byte { return []byte{byte(dt<<4 | opClaim), byte(id)} }

func seedCancel(dt, id, by int) []byte { return []byte{byte(dt<<4 | opCancel), byte(id | by<<1)} }

func seedExtend(dt, minutesFromNow int) []byte {
	return []byte{byte(dt<<4 | opExtend), byte(minutesFromNow + 8)}
}

func seedExpire(dt int) []byte { return []byte{byte(dt<<4 | opExpire)} }

func seedEscalate(dt int) []byte { return []byte{byte(dt<<4 | opEscalate)} }

func seedJump(n int) []byte { return []byte{byte((n-1)<<4 | opJump)} }

func seed(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var three = []int{iU0, iU1, iU2}

// propSeeds are the interesting cases, with the status each must end in.
var propSeeds = []struct {
	name       string
	data       []byte
	wantStatus string
	wantBy     []string
}{
	{
		name: "2 of 3: a veto after one approval rejects",
		data: seed(seedHeader(2, three, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaCurrent),
			seedVote(1, iU1, dReject, 0, shaNone),
			seedVote(1, iU2, dApprove, 0, shaCurrent), // closed
			seedClaim(1, 0)),
		wantStatus: contracts.StatusRejected, wantBy: []string{"u1"},
	},
	{
		name: "2 of 3: an edit resets earlier approvals",
		data: seed(seedHeader(2, three, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaCurrent),
			seedVote(1, iU1, dEdit, 2, shaCurrent),
			seedVote(1, iU2, dApprove, 0, shaRequested), // stale
			seedVote(1, iU2, dApprove, 0, shaCurrent),
			seedClaim(1, 0), seedClaim(1, 1), seedClaim(1, 0)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u1", "u2"},
	},
	{
		name: "an edit back to the requested arguments counts the approvals given for them",
		data: seed(seedHeader(3, []int{iU0, iU1, iU2, iU3}, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedVote(1, iU1, dEdit, 3, shaNone),
			seedVote(1, iU2, dEdit, 1, shaCurrent), // same object as requested, written differently
			seedVote(1, iU3, dApprove, 0, shaRequested)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u0", "u2", "u3"},
	},
	{
		name: "self approval is refused, requester and owner, approve and edit",
		data: seed(seedHeader(1, nil, fVeto, iU0, iU1, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedVote(1, iU1, dEdit, 2, shaCurrent),
			seedVote(1, iU0, dApprove, 0, shaCurrent),
			seedVote(1, iU2, dApprove, 0, shaCurrent)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u2"},
	},
	{
		name: "self approval is counted when allowed",
		data: seed(seedHeader(2, []int{iU0, iU1, iU2}, fVeto|fAllowSelf, iU0, iU1, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedVote(1, iU1, dApprove, 0, shaCurrent)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u0", "u1"},
	},
	{
		name: "without veto two approvals outweigh a reject",
		data: seed(seedHeader(2, three, 0, iX, iE, aAll, 60),
			seedVote(1, iU0, dReject, 0, shaNone),
			seedVote(1, iU1, dApprove, 0, shaNone),
			seedVote(1, iU2, dApprove, 0, shaNone)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u1", "u2"},
	},
	{
		name: "without veto a reject decides once approval is impossible",
		data: seed(seedHeader(2, []int{iU0, iU1}, 0, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedVote(1, iU1, dReject, 0, shaNone)),
		wantStatus: contracts.StatusRejected, wantBy: []string{"u1"},
	},
	{
		name: "duplicate vote ids and a second vote of the same approver change nothing",
		data: seed(seedHeader(2, three, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedRevote(1, 0, iU1, dReject), // v01 again, now as u1's reject
			seedVote(1, iU0, dReject, 0, shaNone),
			seedVote(1, iX, dApprove, 0, shaNone), // not an approver
			seedRevote(1, 0, iU1, dApprove),       // the refused id again
			seedVote(1, iU1, dApprove, 0, shaNone)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u0", "u1"},
	},
	{
		name: "an escalation approver counts once the tier is reached",
		data: seed(seedHeader(1, []int{iU0}, fVeto|fEscalationTier, iX, iX, aAll, 90),
			seedVote(1, iE, dApprove, 0, shaNone), // not yet an approver
			seedEscalate(1),
			seedVote(1, iE, dApprove, 0, shaNone)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"e"},
	},
	{
		name: "extend, a timer fire before the deadline, then on_timeout approve of the edited arguments",
		data: seed(seedHeader(3, three, fVeto|fTimeoutApprove, iX, iE, aAll, 10),
			seedVote(1, iU0, dEdit, 4, shaNone),
			seedExtend(1, 30),
			seedExpire(10), // +12m: extended, not due
			seedJump(4),    // +44m
			seedExpire(0),
			seedExpire(0),
			seedVote(0, iU1, dApprove, 0, shaNone),
			seedClaim(0, 1)),
		wantStatus: contracts.StatusApproved, wantBy: []string{contracts.DecidedByTimeout},
	},
	{
		name: "expiry with on_timeout reject; cancel afterwards is closed",
		data: seed(seedHeader(1, three, fVeto, iX, iE, aAll, 5),
			seedJump(1),
			seedExpire(0),
			seedCancel(0, 0, iU0)),
		wantStatus: contracts.StatusExpired, wantBy: []string{contracts.DecidedByTimeout},
	},
	{
		name: "time never approves a human_input request, even with on_timeout approve",
		data: seed(seedHeader(1, nil, fVeto|fTimeoutApprove, iX, iE, aAll|aHumanInput, 5),
			seedJump(1),
			seedExpire(0),
			seedClaim(0, 0)),
		wantStatus: contracts.StatusExpired, wantBy: []string{contracts.DecidedByTimeout},
	},
	{
		name: "cancel, the same cancel again, another cancel",
		data: seed(seedHeader(2, three, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedCancel(1, 1, iU3), // u3 is no approver of it: not permitted
			seedCancel(1, 0, iU2),
			seedCancel(1, 0, iU2),
			seedCancel(1, 1, iU2),
			seedVote(1, iU1, dApprove, 0, shaNone)),
		wantStatus: contracts.StatusCancelled, wantBy: []string{"u2"},
	},
	{
		name: "respond decides without arguments",
		data: seed(seedHeader(2, three, 0, iX, iE, aApprove|aReject|aRespond, 60),
			seedVote(1, iU0, dEdit, 2, shaNone), // decision_not_allowed
			seedVote(1, iU1, dRespond, 0, shaNone)),
		wantStatus: contracts.StatusResponded, wantBy: []string{"u1"},
	},
	{
		name: "human input: approve is not allowed, an answer decides",
		data: seed(seedHeader(1, nil, fVeto, iX, iE, aAll|aHumanInput, 60),
			seedVote(1, iU0, dApprove, 0, shaNone),
			seedAnswer(1, iU2, 5, 0), // accepted content that fails the question's schema
			seedAnswer(1, iU1, 4, 0)),
		wantStatus: contracts.StatusAnswered, wantBy: []string{"u1"},
	},
	{
		name: "an edit that fails the tool schema is refused; a valid one resets approvals",
		data: seed(seedHeader(2|0x80, three, fVeto, iX, iE, aAll, 60),
			seedVote(1, iU0, dApprove, 0, shaCurrent),
			seedVote(1, iU1, dEdit, 4, shaCurrent), // invalid_arguments: below the minimum
			seedVote(1, iU1, dEdit, 3, shaCurrent),
			seedVote(1, iU2, dApprove, 0, shaCurrent)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u1", "u2"},
	},
	{
		name: "refused votes are capped, the record still decides",
		data: seed(seedHeader(2, three, fVeto|fPrefillRefusals|fRoundTrip, iX, iE, aAll, 60),
			seedVote(1, iX, dApprove, 0, shaNone),
			seedVote(1, iU3, dApprove, 0, shaNone),
			seedVote(1, iU0, dEdit, 5, shaNone), // invalid arguments
			seedVote(1, iU0, dApprove, 0, shaCurrent),
			seedVote(1, iU2, dApprove, 0, shaCurrent)),
		wantStatus: contracts.StatusApproved, wantBy: []string{"u0", "u2"},
	},
}

// TestVoteInterleavingSeeds checks the seed corpus and that each seed means
// what its name says.
func TestVoteInterleavingSeeds(t *testing.T) {
	for _, s := range propSeeds {
		t.Run(s.name, func(t *testing.T) {
			rec := runScenario(t, s.data)
			if rec.Status != s.wantStatus {
				t.Fatalf("status %s, want %s; record %s", rec.Status, s.wantStatus, mustJSON(t, rec))
			}
			if rec.Outcome == nil || !slices.Equal(rec.Outcome.DecidedBy, s.wantBy) {
				t.Fatalf("outcome %+v, want decided by %v", rec.Outcome, s.wantBy)
			}
		})
	}
}

// randomScenario is a pseudo-random scenario: one in four is raw bytes, the
// others are built op by op with weights that favour listed approvers,
// approvals and fresh argument hashes, so that quorums of several approvers,
// edits between approvals and vetoes after approvals are common.
func randomScenario(rng *rand.Rand) []byte {
	data := make([]byte, 7, 7+4*propMaxOps)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if rng.IntN(4) == 0 {
		for range rng.IntN(4 * propMaxOps) {
			data = append(data, byte(rng.Uint32()))
		}
		return data
	}
	data[0] = byte(1+rng.IntN(4)) | data[0]&0x80
	if rng.IntN(4) != 0 {
		data[5] |= aAll
	}
	if rng.IntN(8) != 0 {
		data[5] &^= aHumanInput
	}
	pick := func(weights ...int) int {
		n := rng.IntN(sum(weights))
		for i, w := range weights {
			if n < w {
				return i
			}
			n -= w
		}
		return len(weights) - 1
	}
	for range 1 + rng.IntN(propMaxOps) {
		dt := rng.IntN(4)
		switch pick(15, 2, 1, 1, 1, 1) {
		case 0:
			approver := rng.IntN(8)
			if rng.IntN(4) != 0 {
				approver = rng.IntN(5)
			}
			decision := []int{dApprove, dEdit, dReject, dRespond, dAnswer, dUnknown}[pick(50, 15, 15, 5, 5, 2)]
			argIdx := rng.IntN(8)
			if rng.IntN(4) != 0 {
				argIdx = rng.IntN(5)
			}
			sha := []int{shaNone, shaCurrent, shaRequested, shaOfArgs}[pick(4, 4, 1, 1)]
			switch {
			case rng.IntN(10) == 0:
				data = append(data, seedRevote(dt, rng.IntN(8), approver, decision)...)
			case decision == dAnswer:
				data = append(data, seedAnswer(dt, approver, argIdx, rng.IntN(4))...)
			default:
				data = append(data, seedVote(dt, approver, decision, argIdx, sha)...)
			}
		case 1:
			data = append(data, seedClaim(dt, rng.IntN(2))...)
		case 2:
			if rng.IntN(3) == 0 {
				data = append(data, seedCancel(dt, rng.IntN(2), rng.IntN(7))...)
			} else {
				data = append(data, seedExtend(dt, rng.IntN(64)-8)...)
			}
		case 3:
			data = append(data, seedExpire(dt+rng.IntN(16))...)
		case 4:
			data = append(data, seedEscalate(dt)...)
		default:
			data = append(data, seedJump(1+rng.IntN(16))...)
		}
	}
	return data
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// propScenarios is how many scenarios TestVoteInterleavings checks.
var propScenarios = 2000

// TestVoteInterleavings runs the fuzz checker over fixed pseudo-random
// scenarios, so plain `go test` explores interleavings too.
func TestVoteInterleavings(t *testing.T) {
	n := propScenarios
	if testing.Short() {
		n = min(n, 300)
	}
	statusCount, stats := map[string]int{}, map[string]int{}
	for i := range n {
		rng := rand.New(rand.NewPCG(uint64(i), 0x636f756e746572))
		data := randomScenario(rng)
		rec := runScenarioStats(t, data, stats)
		statusCount[rec.Status]++
		// The same scenario judged by a directory.
		rec = runScenarioWith(t, data, stats, propRoster)
		statusCount[rec.Status]++
		if t.Failed() {
			return
		}
	}
	t.Logf("final statuses over %d scenarios: %v", n, statusCount)
	t.Logf("steps: %v", stats)
	for _, s := range []string{contracts.StatusPending, "approved by 1", "approved by 2", "approved by 3",
		"approved by timeout", "approved edited arguments", "approved after edits and approvals",
		"vetoed after an approval", "rejected without veto", contracts.StatusResponded, contracts.StatusExpired,
		contracts.StatusCancelled, "duplicate",
		"refused " + contracts.ReasonSelfApproval, "refused " + contracts.ReasonStaleArguments,
		"refused " + contracts.ReasonDuplicateVote, "refused " + contracts.ReasonNotAnApprover,
		"refused " + contracts.ReasonClosed, "refused " + contracts.ReasonInvalidArguments,
		"refused " + contracts.ReasonDecisionNotAllowed, "refused " + contracts.ReasonMalformed,
		"refused " + contracts.ReasonAlreadyClaimed, "refused " + contracts.ReasonNotApproved,
		"refused " + contracts.ReasonUnknownApprover, "refused " + contracts.ReasonWrongTenant,
		"refused " + contracts.ReasonNotPermitted, "refused " + contracts.ReasonDeadlineNotLater,
		"refused " + contracts.ReasonApprovalLapsed,
	} {
		if statusCount[s] == 0 && stats[s] == 0 && n >= 1000 { // fewer (-short, -race) may miss a rare one
			t.Errorf("no scenario reached %q: the generator does not explore enough", s)
		}
	}
}

// FuzzVoteInterleavings: any request, any interleaving of votes, commands
// and timer fires.
//
//	go test -run '^$' -fuzz FuzzVoteInterleavings -fuzztime 60s ./contracts/approval/
func FuzzVoteInterleavings(f *testing.F) {
	for _, s := range propSeeds {
		f.Add(s.data)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		runScenario(t, data)
		runScenarioWith(t, data, nil, propRoster)
	})
}

package arbiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/tracing"
	"github.com/countersign/countersign/orchestrator/reviewer"
)

// Durable consumer names. Replicas share them.
const (
	DurableRequests    = "arbiter-requests"
	DurableResolutions = "arbiter-resolutions"
	DurableTimers      = "arbiter-timers"
	// DurableGrantUses logs each use of a standing grant the gates record
	// (hitl.grant.used.<grant_id> on HITL_EVENTS) in the audit log.
	DurableGrantUses = "arbiter-grant-uses"
)

// Config wires an Arbiter.
type Config struct {
	JS jetstream.JetStream
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Registerer receives the arbiter's metrics when set.
	Registerer prometheus.Registerer
	// Concurrency of each consume loop (default 32: measured against 8,
	// full cycles/s rose by about a third lazy and a quarter with fsync,
	// and 64 gave no more; see BENCHMARKS.md).
	Concurrency int
	// UnknownEventDelay is how long a vote for a record that does not exist
	// yet waits before it is retried (default 500 ms); UnknownEventAttempts
	// bounds the tries before it is refused as unknown_event (default 20).
	UnknownEventDelay    time.Duration
	UnknownEventAttempts int
	// Retention caps deadlines (extend) so no request outlives its record.
	Retention time.Duration
	// OnDeadLetter is told about every dead-lettered message.
	OnDeadLetter func(stream, reason string)
	// Policies are policies the arbiter trusts without reading them from
	// the hitl_policy bucket: those a Gate serves from memory rather than
	// from the bucket (see Policies). Every request is checked against the
	// policy version it names: one of these, the built-in default, or a
	// version applied to the bucket; a request naming none is refused.
	Policies PolicySet
	// ClockSkew is how far a request's created_at may be from the moment
	// the server stored it, and the slack of its deadline checks (default
	// one minute).
	ClockSkew time.Duration
	// Receipts signs the receipt of every accepted claim (see receipts.go);
	// nil issues none.
	Receipts *receipt.Signer
	// Audit configures the audit log's checkpoints, signed with Receipts
	// (see audit.go).
	Audit AuditConfig
	// Reviewers are the automated reviewers policies may name, by name
	// (see reviews.go); a rule naming one that is not here gets an
	// opinion with an error, and its requests wait for people.
	Reviewers map[string]*reviewer.Endpoint
	// ReviewWorkers is how many reviewers are asked at once (default 4).
	ReviewWorkers int
	// DeferTimers is how long after creating a record the arbiter writes
	// its timers, and only if it is still pending then (see deferred.go);
	// 0 writes them at once.
	DeferTimers time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.UnknownEventDelay == 0 {
		c.UnknownEventDelay = 500 * time.Millisecond
	}
	if c.UnknownEventAttempts == 0 {
		c.UnknownEventAttempts = 20
	}
	if c.Retention == 0 {
		c.Retention = events.DefaultRetention
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = time.Minute
	}
	if c.ReviewWorkers == 0 {
		c.ReviewWorkers = defaultReviewWorkers
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("arbiter: Config.JS is required"))
	}
	if c.UnknownEventAttempts < 2 {
		errs = append(errs, errors.New("arbiter: Config.UnknownEventAttempts must be at least 2"))
	}
	if c.ClockSkew < 0 || c.ClockSkew > time.Hour {
		errs = append(errs, errors.New("arbiter: Config.ClockSkew must be between 0 and one hour"))
	}
	for name, ep := range c.Reviewers {
		if ep == nil || ep.Name != name {
			errs = append(errs, fmt.Errorf("arbiter: Config.Reviewers[%q] must be an endpoint of that name", name))
		} else if err := ep.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("arbiter: Config.Reviewers: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Arbiter consumes requests, votes and commands and keeps the records.
type Arbiter struct {
	cfg      Config
	kv       jetstream.KeyValue
	writer   *events.RecordWriter // writes records to kv, with their summary headers
	policies *policyBook
	m        metrics
	// lim is the size budget, from the server's max payload.
	lim     contracts.Limits
	waiting *unknownWaits
	commits *commits
	// records holds the records this arbiter wrote last, decoded.
	records *recordCache
	// grants is hitl_grants, opened when first needed; gm its metrics.
	grantsMu sync.Mutex
	grants   jetstream.KeyValue
	gm       grantMetrics
	// receipts is hitl_receipts, opened when first needed.
	receiptsMu sync.Mutex
	receipts   jetstream.KeyValue
	passkeysMu sync.Mutex
	passkeys   jetstream.KeyValue
	audit      *auditTrail
	deferred   *deferredTimers
	// reviews queues the records whose reviewer is to be asked.
	reviews *reviews
}

type metrics struct {
	created prometheus.Counter
	// requestsRefused counts requests refused, by reason: dead-lettered
	// instead of creating a record (malformed, too_large), or recorded
	// rejected because they ask for less than the policy version they name
	// gives (see integrity.go).
	requestsRefused *prometheus.CounterVec
	decided         *prometheus.CounterVec
	refused         *prometheus.CounterVec
	conflict        prometheus.Counter
	latency         *prometheus.HistogramVec
	// timerLag is how late a timer is applied after it was due.
	timerLag *prometheus.HistogramVec
	// reminders and escalations count announced reminders and tiers reached.
	reminders, escalations prometheus.Counter
	// unanswerable counts claim and vote requests left alone because their
	// reply subject is not an inbox, by kind.
	unanswerable *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		created: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_requests_created_total", Help: "Approval records created by the arbiter.",
		}),
		requestsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_requests_refused_total",
			Help: "Approval requests the arbiter refused, by reason: malformed or too large (dead-lettered, no record), or asking for less than the policy version they name gives, or naming no known version (recorded rejected).",
		}, []string{"reason"}),
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_decisions_total", Help: "Approvals that reached a terminal status, by status.",
		}, []string{"status"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_refused_votes_total", Help: "Votes and commands the arbiter refused, by reason.",
		}, []string{"reason"}),
		conflict: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_record_conflicts_total", Help: "Record writes retried after a compare-and-set conflict.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_decision_latency_seconds",
			Help:    "Time from a request's creation to its terminal outcome, by risk.",
			Buckets: []float64{0.001, 0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600},
		}, []string{"risk"}),
		timerLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_timer_lag_seconds",
			Help:    "How late an expiry, reminder or escalation timer was applied after it was due, by kind.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		reminders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_reminders_total", Help: "Reminders announced for pending approvals.",
		}),
		escalations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_escalations_total", Help: "Escalation tiers reached by pending approvals.",
		}),
		unanswerable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_requests_unanswerable_total",
			Help: "Claim and vote requests the arbiter neither applied nor answered because their reply subject is not an inbox, by kind (claim, vote).",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.created, m.requestsRefused, m.decided, m.refused, m.conflict, m.latency, m.timerLag, m.reminders, m.escalations, m.unanswerable)
	}
	return m
}

// New opens the approvals bucket and returns an Arbiter. The streams and
// buckets must have been provisioned (events.Provision).
func New(ctx context.Context, cfg Config) (*Arbiter, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("arbiter: open bucket %s: %w", contracts.BucketApprovals, err)
	}
	// hitl_policy is opened when a request first needs a stored version.
	policies := newPolicyBook(cfg.JS, cfg.Policies)
	policies.keys = newLiveKeys(cfg.Registerer)
	return &Arbiter{
		cfg: cfg, kv: kv, writer: events.NewRecordWriter(cfg.JS), policies: policies, m: newMetrics(cfg.Registerer),
		lim:      contracts.LimitsFor(cfg.JS.Conn().MaxPayload()),
		waiting:  newUnknownWaits(),
		commits:  newCommits(),
		records:  newRecordCache(),
		gm:       newGrantMetrics(cfg.Registerer),
		audit:    newAuditTrail(cfg.JS),
		deferred: newDeferredTimers(),
		reviews:  newReviews(cfg.Registerer),
	}, nil
}

// Run consumes requests, votes, commands, timers and grant uses, and
// answers claim and vote requests, until ctx ends. If one consume loop fails, the others are
// stopped too and Run returns the error once all have ended.
func (a *Arbiter) Run(ctx context.Context) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumers := a.consumers()
	loops := 3 + len(consumers) // checkpoints, claims, votes and the consumers
	errc := make(chan error, loops)
	go func() { errc <- a.runCheckpoints(ctx) }()
	// The directory and live policy version, followed as they change.
	go a.policies.keys.watch(ctx, a.policies, a.cfg.Logger)
	reviewing := make(chan struct{})
	go func() { a.runReviews(ctx); close(reviewing) }()
	defer func() { <-reviewing }()
	go func() { errc <- a.serveClaims(ctx) }()
	go func() { errc <- a.serveVotes(ctx) }()
	swept := make(chan struct{})
	go func() { a.announceUnannounced(ctx); close(swept) }()
	defer func() { <-swept }()
	for _, c := range consumers {
		go func() { errc <- events.Consume(ctx, a.cfg.JS, c.cfg, c.h) }()
	}
	var errs []error
	for i := range loops {
		err := <-errc
		if i == 0 {
			cancel()
		}
		// A loop still starting when Run was told to stop is no failure.
		if err != nil && !(parent.Err() != nil && errors.Is(err, context.Canceled)) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// consumer is one of the arbiter's durable consumers and its handler.
type consumer struct {
	cfg events.ConsumerConfig
	h   events.Handler
}

// consumers are the arbiter's durable consumers: requests, votes and
// commands, timers, and grant uses.
func (a *Arbiter) consumers() []consumer {
	base := events.ConsumerConfig{
		Concurrency: a.cfg.Concurrency, MaxBackoff: arbiterMaxBackoff,
		Logger: a.cfg.Logger, OnDeadLetter: a.cfg.OnDeadLetter,
	}
	requests, resolutions, timers, uses := base, base, base, base
	requests.Stream, requests.Durable = contracts.StreamRequests, DurableRequests
	requests.FilterSubjects = []string{contracts.SubjectToolRequestedPrefix + ">", contracts.SubjectInputRequestedPrefix + ">"}
	// Requests whose timers are deferred stay unacknowledged until they
	// are written (deferred.go).
	requests.MaxAckPending = maxDeferred + max(1000, a.cfg.Concurrency*4)
	resolutions.Stream, resolutions.Durable = contracts.StreamResolutions, DurableResolutions
	// Votes for records not created yet are retried while the requests
	// consumer catches up (see unknownEvent), so the loop's own limit sits
	// far beyond UnknownEventAttempts.
	resolutions.MaxDeliver = max(1000, a.cfg.UnknownEventAttempts*50)
	timers.Stream, timers.Durable = contracts.StreamTimers, DurableTimers
	timers.FilterSubjects = []string{contracts.SubjectTimerFirePrefix + ">"}
	uses.Stream, uses.Durable = contracts.StreamEvents, DurableGrantUses
	uses.FilterSubjects = []string{contracts.SubjectGrantUsedPrefix + ">"}
	return []consumer{
		{requests, a.handleRequest}, {resolutions, a.handleResolution},
		{timers, a.handleTimer}, {uses, a.handleGrantUse},
	}
}

func (a *Arbiter) handleRequest(ctx context.Context, msg jetstream.Msg) error {
	var req contracts.ApprovalRequested
	if err := contracts.Decode(msg.Data(), &req); err != nil {
		return events.Poison(fmt.Errorf("decode request: %w", err))
	}
	if err := approval.ValidateRequest(&req); err != nil {
		a.m.requestsRefused.WithLabelValues(contracts.ReasonMalformed).Inc()
		return events.Poison(fmt.Errorf("invalid request: %w", err))
	}
	// What the record of a request could not hold on its way to a terminal
	// state is refused before anything is created.
	// The check's encoding of the request goes into the record below.
	reqData, err := a.lim.EncodeRequest(&req)
	if err != nil {
		a.m.requestsRefused.WithLabelValues(contracts.ReasonTooLarge).Inc()
		a.cfg.Logger.Warn("approval request refused", "event_id", req.EventID, "agent", req.Run.Agent,
			"reason", contracts.ReasonTooLarge, "err", err)
		return events.Poison(fmt.Errorf("request refused: %w", err))
	}
	if req.Quorum.Required < 1 {
		req.Quorum.Required = 1
		reqData = nil // encoded again with the quorum it is stored with
	}
	md, err := msg.Metadata()
	if err != nil {
		return events.Poison(fmt.Errorf("request without stream metadata: %w", err))
	}
	// The snapshot is checked against the policy version it names, timed by
	// the server's clock (when the request was stored), not the publisher's.
	ref, err := a.verify(ctx, &req, md.Timestamp)
	if err != nil {
		return err
	}
	if ref != nil {
		return a.refuse(ctx, req, ref)
	}
	rec := approval.NewRecord(req, a.cfg.Now())
	if rec.Review, err = a.reviewOf(ctx, &req); err != nil {
		return err
	}
	data, err := contracts.MarshalRecord(&rec, reqData)
	if err != nil {
		return events.Poison(err)
	}
	rev, err := a.writer.Create(ctx, req.EventID, data, &rec)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		// A re-published or redelivered request: the record stands.
		_, err := a.existing(ctx, req.EventID)
		return err
	}
	a.records.put(req.EventID, rec, rev, len(data))
	a.audit.written(req.EventID, rev, data)
	if err := a.auditRecord(ctx, audit.ChangeCreated, &rec, rev); err != nil {
		return err // redelivered: the record exists, and existing appends again
	}
	a.m.created.Inc()
	tracing.Record(ctx, tracing.SpanRequest, req.Traceparent, md.Timestamp, tracing.Approval(&rec)...)
	// Waiters of the approval read its record on this; a lost message is
	// covered by their own read after they register, and after reconnects.
	_ = a.cfg.JS.Conn().Publish(contracts.CreatedSubject(req.EventID), nil)
	a.cfg.Logger.Info("approval requested", "event_id", req.EventID, "run_id", req.Run.ID, "agent", req.Run.Agent,
		"rule", req.Policy.Rule, "risk", req.Risk, "expires_at", req.ExpiresAt, "trace_id", contracts.TraceID(req.Traceparent))
	if err := a.startReview(ctx, rec); err != nil {
		return err
	}
	if a.deferTimers(ctx, msg, rec) {
		return events.ErrDetached // acknowledged once its timers are written
	}
	// An error here redelivers the request, which schedules again.
	if err := a.scheduleExpiry(ctx, rec); err != nil {
		return err
	}
	return a.scheduleTimers(ctx, rec)
}

// existing finishes what a request for a record that already exists may
// have left undone: a pending record's timers may not have been scheduled
// if the first attempt failed after the create (scheduling again replaces
// the same schedules), and a terminal one's decided event may not have been
// published (it is published only if missing).
func (a *Arbiter) existing(ctx context.Context, eventID string) (contracts.Record, error) {
	entry, err := a.kv.Get(ctx, eventID)
	if err != nil {
		return contracts.Record{}, err
	}
	var cur contracts.Record
	if err := contracts.DecodeRecord(eventID, entry.Value(), &cur); err != nil {
		return cur, events.Poison(fmt.Errorf("record %s is unreadable: %w", eventID, err))
	}
	// The creation's entry may have been lost with the attempt that wrote
	// the record; within the duplicate window this appends nothing.
	if err := a.auditRecord(ctx, audit.ChangeCreated, &cur, entry.Revision()); err != nil {
		return cur, err
	}
	if cur.Status != contracts.StatusPending {
		return cur, a.reannounce(ctx, cur, entry.Revision())
	}
	if err := a.scheduleExpiry(ctx, cur); err != nil {
		return cur, err
	}
	if err := a.scheduleTimers(ctx, cur); err != nil {
		return cur, err
	}
	return cur, a.startReview(ctx, cur)
}

func (a *Arbiter) handleResolution(ctx context.Context, msg jetstream.Msg) error {
	subj := msg.Subject()
	switch {
	case strings.HasPrefix(subj, contracts.SubjectResolvedPrefix):
		return a.handleVote(ctx, msg, strings.TrimPrefix(subj, contracts.SubjectResolvedPrefix))
	case strings.HasPrefix(subj, contracts.SubjectCommandPrefix):
		return a.handleCommand(ctx, msg, strings.TrimPrefix(subj, contracts.SubjectCommandPrefix), false)
	case strings.HasPrefix(subj, contracts.SubjectOpinionPrefix):
		return a.handleOpinion(ctx, msg)
	}
	return events.Poison(fmt.Errorf("unexpected subject %s", subj))
}

// handleVote applies the vote msg carries on the approval subjectID names:
// stored on HITL_RESOLUTIONS, or asked by request (serveVotes).
func (a *Arbiter) handleVote(ctx context.Context, msg jetstream.Msg, subjectID string) error {
	var v contracts.Vote
	if err := contracts.Decode(msg.Data(), &v); err != nil {
		return events.Poison(fmt.Errorf("decode vote: %w", err))
	}
	if err := validateVote(&v, subjectID); err != nil {
		a.m.refused.WithLabelValues(contracts.ReasonMalformed).Inc()
		return events.Poison(err)
	}
	// Who the voter is may do what the live directory says, read now.
	roster, err := a.policies.directory(ctx)
	if err != nil {
		return err
	}
	// So are the voter's passkeys: a revoked one stops counting at once.
	keys, party, err := a.passkeysOf(ctx, &v)
	if err != nil {
		return err
	}
	return a.apply(ctx, msg, op{
		eventID: v.EventID,
		// The same whichever way the vote came (stored, or by request).
		changedID: "vote-" + v.VoteID,
		span:      tracing.SpanVote,
		attrs:     []attribute.KeyValue{tracing.AttrDecision.String(v.Decision)},
		apply: func(rec contracts.Record) approval.Result {
			res := approval.ApplyVoteAs(rec, v, a.cfg.Now(), a.lim, roster)
			if res.Changed && res.Refusal == "" {
				// Only a vote that would count is asked for its passkey,
				// so who may not vote hears why first.
				if reason, detail := approval.PasskeyRefusal(&rec, &v, keys, party, a.cfg.Now()); reason != "" {
					return approval.Refuse(rec, v, reason, detail, a.cfg.Now())
				}
				if why := grantConditionProblem(&v); why != "" {
					return approval.Refuse(rec, v, contracts.ReasonGrantNotAllowed, why, a.cfg.Now())
				}
			}
			return a.withEditSensitive(ctx, res, &v)
		},
		tooLarge: func(rec contracts.Record) approval.Result {
			return approval.Refuse(rec, v, contracts.ReasonTooLarge, "the approval record has no room for this vote", a.cfg.Now())
		},
		counted: func() *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeVoteCounted, VoteID: v.VoteID, Approver: &v.Approver}
		},
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: contracts.ChangeVoteRefused, VoteID: v.VoteID, Approver: &v.Approver, Reason: reason}
		},
	})
}

// handleCommand applies a command on the approval subjectID names, from
// HITL_RESOLUTIONS or, claims only (claimOnly), from a claim request.
func (a *Arbiter) handleCommand(ctx context.Context, msg jetstream.Msg, subjectID string, claimOnly bool) error {
	c, err := readCommand(msg, subjectID, claimOnly)
	if err != nil {
		return err
	}
	if c.Command == contracts.CommandRevokeGrant {
		return a.revokeGrant(ctx, msg, c)
	}
	if c.Command == contracts.CommandExtend {
		if c.Until.After(a.cfg.Now().Add(a.cfg.Retention)) {
			c.Until = a.cfg.Now().Add(a.cfg.Retention)
		}
	}
	// The issuer is checked against the live directory, read now,
	// whatever credential published the command.
	roster, err := a.policies.directory(ctx)
	if err != nil {
		return err
	}
	o := a.commandOp(c, roster)
	if c.Command == contracts.CommandClaim {
		a.claimSteps(&o, c)
	}
	return a.apply(ctx, msg, o)
}

// readCommand decodes and checks a command; every error is for good.
func readCommand(msg jetstream.Msg, subjectID string, claimOnly bool) (contracts.Command, error) {
	var c contracts.Command
	if err := contracts.Decode(msg.Data(), &c); err != nil {
		return c, events.Poison(fmt.Errorf("decode command: %w", err))
	}
	if err := validateCommand(&c, subjectID); err != nil {
		return c, events.Poison(err)
	}
	if claimOnly && c.Command != contracts.CommandClaim {
		return c, events.Poison(fmt.Errorf("only claim commands are asked for on %s, not %q", contracts.SubjectClaimPrefix+"<event_id>", c.Command))
	}
	return c, nil
}

// commandOp is the operation that applies c, its issuer judged by roster.
func (a *Arbiter) commandOp(c contracts.Command, roster *approval.Roster) op {
	return op{
		eventID: c.EventID,
		span:    c.Command, // claim, outcome, cancel, extend
		attrs:   commandAttrs(c),
		apply: func(rec contracts.Record) approval.Result {
			if c.Command == contracts.CommandExtend && c.Until.After(rec.Request.CreatedAt.Add(a.cfg.Retention)) {
				c.Until = rec.Request.CreatedAt.Add(a.cfg.Retention)
			}
			if c.Command == contracts.CommandClaim {
				return a.withReceipt(approval.ApplyCommandAs(rec, c, a.cfg.Now(), roster))
			}
			return approval.ApplyCommandAs(rec, c, a.cfg.Now(), roster)
		},
		counted: func() *contracts.Changed {
			switch c.Command {
			case contracts.CommandClaim:
				return &contracts.Changed{Change: contracts.ChangeClaimed, By: c.By}
			case contracts.CommandExtend:
				return &contracts.Changed{Change: contracts.ChangeExtended, By: c.By}
			case contracts.CommandOutcome:
				return &contracts.Changed{Change: contracts.ChangeOutcome, By: c.By}
			}
			return nil // a cancel always decides
		},
		after: func(ctx context.Context, rec contracts.Record) error {
			if c.Command != contracts.CommandExtend || rec.Status != contracts.StatusPending {
				return nil
			}
			return a.scheduleExpiry(ctx, rec) // replaces the old deadline's timer
		},
		refused: func(reason string) *contracts.Changed {
			return &contracts.Changed{Change: commandRefusedChange(c.Command), By: c.By, Reason: reason}
		},
		tooLarge: func(contracts.Record) approval.Result { return approval.Result{Refusal: contracts.ReasonTooLarge} },
	}
}

// commandAttrs are the span attributes of a command: an outcome's status.
func commandAttrs(c contracts.Command) []attribute.KeyValue {
	if c.Command != contracts.CommandOutcome {
		return nil
	}
	return []attribute.KeyValue{tracing.AttrOutcome.String(c.Status)}
}

// claimSteps adds a claim's own steps to o: its announcements carry its
// command id (a claim asked for by request and then published as a
// command, its reply lost, is announced once within the duplicate window,
// and one whose announcement was lost to a crash is announced when it
// comes back); its receipt is stored before the claim is announced or
// answered, so whoever learns of the claim finds it.
func (a *Arbiter) claimSteps(o *op, c contracts.Command) {
	o.changedID = "claim:" + c.CommandID
	o.settle = func(ctx context.Context, rec contracts.Record) error {
		if rec.Claim == nil || rec.Claim.ClaimID != c.ClaimID {
			return nil
		}
		return a.issueReceipt(ctx, rec, c.By)
	}
	o.again = func(ctx context.Context, rec contracts.Record, rev uint64) error {
		if rec.Claim == nil || rec.Claim.ClaimID != c.ClaimID {
			return nil
		}
		ch := o.counted()
		ch.Status = rec.Status
		return a.publishChanged(ctx, c.EventID, ch, rev, o.changedID)
	}
}

// validateVote checks what ties a vote to its approval and approver
// (contracts.CheckVoteIdentity) and that it names the subject's approval.
// A vote that fails cannot be recorded on an approval and is dead-lettered;
// what it carries is checked when it is applied (approval.ApplyVoteWithin), and a
// vote that breaks those rules is recorded as refused.
func validateVote(v *contracts.Vote, subjectID string) error {
	if v.Spec != contracts.SpecVote {
		return fmt.Errorf("unknown spec %q", contracts.TruncateText(v.Spec, 64))
	}
	if v.EventID != subjectID {
		return errors.New("event_id does not match the subject")
	}
	if e := contracts.CheckVoteIdentity(v); e != nil {
		return e
	}
	if isReviewerVote(v) {
		return errors.New("a vote on the bus may not claim a reviewer's identity")
	}
	return nil
}

func validateCommand(c *contracts.Command, subjectID string) error {
	if c.Spec != contracts.SpecCommand {
		return fmt.Errorf("unknown spec %q", contracts.TruncateText(c.Spec, 64))
	}
	if c.EventID != subjectID {
		return errors.New("event_id does not match the subject")
	}
	if e := contracts.CheckCommandFields(c); e != nil {
		return e
	}
	return nil
}

// commandRefusedChange is the change kind that announces a refused command.
func commandRefusedChange(command string) string {
	switch command {
	case contracts.CommandCancel:
		return contracts.ChangeCancelRefused
	case contracts.CommandExtend:
		return contracts.ChangeExtendRefused
	case contracts.CommandOutcome:
		return contracts.ChangeOutcomeRefused
	}
	return contracts.ChangeClaimRefused
}

// op is one vote or command to apply to a record.
type op struct {
	eventID string
	// span, when set, names the span of the operation (tracing.SpanVote,
	// a command's name), with attrs beside the approval's own.
	span  string
	attrs []attribute.KeyValue
	// apply is the pure transition (approval.ApplyVote, approval.ApplyCommand).
	apply func(contracts.Record) approval.Result
	// counted is the change announced when apply changed the record without
	// deciding it or refusing; nil announces nothing.
	counted func() *contracts.Changed
	// refused is the change announced when apply refused with reason.
	refused func(reason string) *contracts.Changed
	// after, when set, runs once the record was changed without being
	// decided, and again when the operation comes back as a duplicate on a
	// record that is still open, so a step lost to a crash is redone.
	after func(ctx context.Context, rec contracts.Record) error
	// again, when set, runs too when the operation comes back as a
	// duplicate on a decided record (rev is the record's revision).
	again func(ctx context.Context, rec contracts.Record, rev uint64) error
	// changedID, when set, tells this operation's changed announcements
	// apart from others of the same kind, instead of its message's stream
	// sequence.
	changedID string
	// settle, when set, runs once the record the operation changed is
	// written, before anything is announced, and again when the operation
	// comes back as a duplicate, so a step lost to a crash is redone.
	settle func(ctx context.Context, rec contracts.Record) error
	// missing, when set, handles a record that does not exist instead of
	// retrying the message as an unknown event.
	missing func() error
	// tooLarge, when set, is the result instead of a change whose record
	// would not fit the max payload: a refusal. Without it such a change is
	// a permanent error (dead-lettered).
	tooLarge func(contracts.Record) approval.Result
}

// apply runs o on the current record and writes the result with
// compare-and-set, retrying on conflicts with other replicas.
//
// Operations on one record that arrive together are applied as a group
// (see commits): the first one in applies every operation queued behind it
// to the record in order and writes the record once for all, so a flood of
// votes on one approval costs a few writes, and the consume loop's workers
// stay free for every other approval.
func (a *Arbiter) apply(ctx context.Context, msg jetstream.Msg, o op) error {
	p := &queuedOp{msg: msg, o: o, done: make(chan struct{})}
	batch, leader := a.commits.join(o.eventID, p)
	if !leader {
		<-p.done
		return p.err
	}
	for ; len(batch) > 0; batch = a.commits.next(o.eventID) {
		a.applyGroup(ctx, batch)
	}
	return p.err
}

// applyGroup applies the operations of one record, in order, to the
// record, writes it once, then announces each operation's effect. Each
// operation's error is its own.
func (a *Arbiter) applyGroup(ctx context.Context, group []*queuedOp) {
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	for attempt := 0; ; attempt++ {
		rev, rec, cached := a.readGroupRecord(ctx, group, attempt == 0)
		if rec == nil {
			return
		}
		data, last := a.applyOps(group, *rec)
		if data == nil && cached {
			// Nothing to write means nothing checks the cached record
			// against the bucket: a refusal or a duplicate must rest on
			// the current record, so read it and apply again.
			continue
		}
		rev, again := a.writeGroup(ctx, group, rev, data, last, attempt)
		if again {
			continue
		}
		a.announceGroup(ctx, group, rev)
		return
	}
}

// readGroupRecord returns the group's record and its revision: the one this
// arbiter last wrote when useCache is set and it has one (cached is then
// true), otherwise the one read from the bucket. When there is none, or it
// cannot be read, it sets every operation's error and returns a nil record.
func (a *Arbiter) readGroupRecord(ctx context.Context, group []*queuedOp, useCache bool) (rev uint64, _ *contracts.Record, cached bool) {
	eventID := group[0].o.eventID
	if useCache {
		if rec, rev, ok := a.records.get(eventID); ok {
			a.recordFound(group)
			return rev, &rec, true
		}
	}
	entry, err := a.kv.Get(ctx, eventID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		a.records.drop(eventID)
		for _, p := range group {
			if p.o.missing != nil {
				p.err = p.o.missing()
			} else {
				p.err = a.unknownEvent(p.msg, eventID)
			}
		}
		return 0, nil, false
	}
	a.recordFound(group)
	if err != nil {
		setErr(group, err)
		return 0, nil, false
	}
	var rec contracts.Record
	if err := contracts.DecodeRecord(eventID, entry.Value(), &rec); err != nil {
		setErr(group, events.Poison(fmt.Errorf("record %s is unreadable: %w", eventID, err)))
		return 0, nil, false
	}
	return entry.Revision(), &rec, false
}

// recordFound ends the unknown-event waits of the group's votes: their
// record exists.
func (a *Arbiter) recordFound(group []*queuedOp) {
	for _, p := range group {
		if md, err := p.msg.Metadata(); err == nil && md.Stream == contracts.StreamResolutions {
			a.waiting.done(md.Sequence.Stream)
		}
	}
}

// applyOps applies each operation to the record the ones before it made,
// and returns the encoded record to write, or nil when none changed it, and
// the record it encodes.
func (a *Arbiter) applyOps(group []*queuedOp, rec contracts.Record) ([]byte, contracts.Record) {
	cur, data := rec, []byte(nil)
	for _, p := range group {
		p.before = cur
		p.res, p.err, p.written = approval.Result{}, nil, false
		res := p.o.apply(cur)
		d, res, err := a.encode(cur, res, p.o)
		p.res = res
		if err != nil {
			p.err = err
			continue
		}
		if res.Changed && !res.Duplicate {
			cur, data, p.written = res.Record, d, true
		}
	}
	return data, cur
}

// writeGroup writes data (the encoding of rec), if any, over revision rev
// with CAS and returns the revision to announce; the record written is
// cached. It reports true when another write came first and the group must
// be applied again; after 50 conflicts it gives the operations that changed
// the record a retryable error instead.
func (a *Arbiter) writeGroup(ctx context.Context, group []*queuedOp, rev uint64, data []byte, rec contracts.Record, attempt int) (uint64, bool) {
	if data == nil {
		return rev, false
	}
	eventID := group[0].o.eventID
	next, err := a.writer.Update(ctx, eventID, data, &rec, rev)
	if err == nil {
		a.records.put(eventID, rec, next, len(data))
		a.audit.written(eventID, next, data)
		return next, false
	}
	a.records.drop(eventID)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
		a.m.conflict.Inc()
		if attempt < 50 {
			return 0, true
		}
		err = events.Retry(10*time.Millisecond, err)
	}
	for _, p := range group {
		if p.written {
			p.err = err
		}
	}
	// The others did not depend on the write; announce them.
	return rev, false
}

// announceGroup announces what each operation without an error did.
// Refusals are announced side by side (a flood of them must not take a
// round trip each in turn); the rest in order.
func (a *Arbiter) announceGroup(ctx context.Context, group []*queuedOp, rev uint64) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for _, p := range group {
		if p.err != nil {
			continue
		}
		if p.res.Refusal == "" || p.res.Duplicate {
			p.err = a.traced(ctx, p, rev)
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			p.err = a.traced(ctx, p, rev)
		}()
	}
	wg.Wait()
}

// traced runs finish inside the operation's span, a child of the review
// that asked for the approval, in the agent's trace; an operation that
// decides the approval adds the decision span beneath its own.
func (a *Arbiter) traced(ctx context.Context, p *queuedOp, rev uint64) error {
	if !tracing.Active() {
		return a.finish(ctx, p, rev)
	}
	rec := p.before
	if p.res.Changed {
		rec = p.res.Record
	}
	parent := rec.Request.Traceparent
	span := trace.SpanFromContext(ctx)
	if p.o.span != "" {
		ctx, span = tracing.Start(ctx, p.o.span, parent, append(tracing.Approval(&rec), p.o.attrs...)...)
		defer span.End()
		parent = "" // the decision is a child of this span
	}
	err := a.finish(ctx, p, rev)
	span.SetAttributes(tracing.AttrStatus.String(rec.Status))
	if p.res.Refusal != "" {
		span.SetAttributes(tracing.AttrRefusal.String(p.res.Refusal))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	if p.res.Decided && !p.res.Duplicate && rec.Outcome != nil {
		_, d := tracing.Start(ctx, tracing.SpanDecision, parent, append(tracing.Approval(&rec),
			tracing.AttrStatus.String(rec.Status), tracing.AttrDecision.String(rec.Outcome.Decision))...)
		d.End()
	}
	return nil
}

func setErr(group []*queuedOp, err error) {
	for _, p := range group {
		p.err = err
	}
}

// finish announces what one operation of a group did, once the record is
// written at rev.
func (a *Arbiter) finish(ctx context.Context, p *queuedOp, rev uint64) error {
	o, res, eventID := p.o, p.res, p.o.eventID
	// The group runs under its leader's context: what this operation
	// announces goes on in its own message's trace.
	if h := p.msg.Headers(); h != nil {
		if tp := h.Get(events.HeaderTraceparent); tp != "" {
			ctx = contracts.WithTraceparent(ctx, tp)
		}
	}
	if o.settle != nil && (res.Duplicate || res.Changed && res.Refusal == "") {
		rec := res.Record
		if res.Duplicate {
			rec = p.before
		}
		if err := o.settle(ctx, rec); err != nil {
			return err
		}
	}
	if res.Duplicate {
		if p.before.Terminal() {
			// The outcome may not have been announced, nor its grant
			// written, if a replica died between its write and its publish.
			if err := a.issueGrant(ctx, p.before); err != nil {
				return err
			}
			if err := a.reannounce(ctx, p.before, rev); err != nil || o.again == nil {
				return err
			}
			return o.again(ctx, p.before, rev)
		}
		if o.after != nil {
			return o.after(ctx, p.before)
		}
		return nil
	}
	if !res.Changed {
		// Refused without a write (commands): the record stays as it is.
		a.m.refused.WithLabelValues(res.Refusal).Inc()
		ch := o.refused(res.Refusal)
		ch.Status = p.before.Status
		return a.publishChanged(ctx, eventID, ch, rev, changedKey(p))
	}
	if res.Refusal != "" {
		// Refused and recorded in the record (votes).
		a.m.refused.WithLabelValues(res.Refusal).Inc()
		ch := o.refused(res.Refusal)
		ch.Status = res.Record.Status
		return a.publishChanged(ctx, eventID, ch, rev, changedKey(p))
	}
	if res.Decided {
		a.m.decided.WithLabelValues(res.Record.Status).Inc()
		a.cfg.Logger.Info("approval decided", "event_id", eventID, "run_id", res.Record.Request.Run.ID,
			"status", res.Record.Status, "decided_by", res.Record.Outcome.DecidedBy,
			"trace_id", contracts.TraceID(res.Record.Request.Traceparent), "by_trace_id", contracts.TraceID(contracts.TraceparentFrom(ctx)))
		a.m.latency.WithLabelValues(res.Record.Request.Risk).Observe(res.Record.Outcome.DecidedAt.Sub(res.Record.Request.CreatedAt).Seconds())
		// The grant is written before the decision is announced: a run
		// resumed by the announcement finds it for its next call.
		if err := a.issueGrant(ctx, res.Record); err != nil {
			return err
		}
		if err := a.announce(ctx, res.Record, rev); err != nil {
			return err
		}
		if !a.decidedBeforeTimers(eventID) {
			a.cancelTimers(res.Record)
		}
		return nil
	}
	if ch := o.counted(); ch != nil {
		ch.Status = res.Record.Status
		if err := a.publishChanged(ctx, eventID, ch, rev, changedKey(p)); err != nil {
			return err
		}
	}
	if o.after != nil {
		return o.after(ctx, res.Record)
	}
	return nil
}

// encode encodes the record res makes, the last line of defence of the
// size budget: a change whose record would not fit the max payload becomes
// o.tooLarge's refusal, never a write that fails and is retried.
func (a *Arbiter) encode(rec contracts.Record, res approval.Result, o op) ([]byte, approval.Result, error) {
	if !res.Changed {
		return nil, res, nil
	}
	data, err := res.Encoded, error(nil)
	if data == nil {
		data, err = contracts.Marshal(res.Record)
	}
	if err != nil {
		return nil, res, events.Poison(err)
	}
	if len(data) <= a.lim.Record {
		return data, res, nil
	}
	a.cfg.Logger.Warn("approval record would not fit the max payload", "event_id", o.eventID,
		"size", len(data), "limit", a.lim.Record)
	if o.tooLarge == nil {
		a.m.refused.WithLabelValues(contracts.ReasonTooLarge).Inc()
		return nil, res, events.Poison(fmt.Errorf("%w: record %s would take %d bytes, more than %d", contracts.ErrTooLarge, o.eventID, len(data), a.lim.Record))
	}
	res = o.tooLarge(rec)
	if !res.Changed {
		return nil, res, nil
	}
	if data, err = contracts.Marshal(res.Record); err != nil || len(data) > a.lim.Record {
		a.m.refused.WithLabelValues(contracts.ReasonTooLarge).Inc()
		return nil, res, events.Poison(fmt.Errorf("%w: record %s has no room for a refusal", contracts.ErrTooLarge, o.eventID))
	}
	return data, res, nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// arbiterMaxBackoff caps the pause before a failed request, vote or timer
// is tried again. Failures here are the bus being briefly unavailable (a
// node restarting, a leader election), and every message the arbiter holds
// back delays a decision or a waiting run; the delivery count that sets the
// backoff also grows while a vote waits for its record, so without a low cap
// one error after that wait would hold a vote back for half a minute.
const arbiterMaxBackoff = 2 * time.Second

// unknownEvent retries a message for a record that does not exist yet, and
// refuses it as unknown_event on its last attempt. How many such messages
// wait at once is bounded (see maxWaitsPerEvent): past the bounds a message
// is refused at once, so one approval's votes cannot hold the capacity of
// the consumer every approval shares.
func (a *Arbiter) unknownEvent(msg jetstream.Msg, eventID string) error {
	md, err := msg.Metadata()
	if err != nil {
		return events.Retry(a.cfg.UnknownEventDelay, errors.New(contracts.ReasonUnknownEvent))
	}
	now := time.Now()
	seq := md.Sequence.Stream
	horizon := now.Add(2*time.Duration(a.cfg.UnknownEventAttempts)*a.cfg.UnknownEventDelay + time.Minute)
	eventFull, allFull := a.waiting.wait(seq, eventID, now, horizon)
	if md.NumDelivered >= uint64(a.cfg.UnknownEventAttempts) || eventFull || allFull {
		// Only give up once every request stored so far has been handled:
		// while requests wait (the arbiter is catching up after an outage),
		// the vote's record may yet be created.
		if backlog, berr := a.requestBacklog(); (berr != nil || backlog) && !eventFull {
			return events.Retry(a.cfg.UnknownEventDelay, errors.New(contracts.ReasonUnknownEvent+" (requests still being handled)"))
		}
		a.waiting.done(seq)
		a.m.refused.WithLabelValues(contracts.ReasonUnknownEvent).Inc()
		if eventFull {
			return events.Poison(fmt.Errorf("%s: %d messages already wait for this approval's record", contracts.ReasonUnknownEvent, maxWaitsPerEvent))
		}
		return events.Poison(errors.New(contracts.ReasonUnknownEvent))
	}
	return events.Retry(a.cfg.UnknownEventDelay, errors.New(contracts.ReasonUnknownEvent))
}

// requestBacklog reports whether the requests consumer still has messages
// to deliver or acknowledge: a vote cannot be refused as unknown_event
// while a request stored before it may be unhandled.
func (a *Arbiter) requestBacklog() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := a.cfg.JS.Consumer(ctx, contracts.StreamRequests, DurableRequests)
	if err != nil {
		return false, err
	}
	info := cons.CachedInfo() // read by the lookup just now
	return info.NumPending > 0 || info.NumAckPending > 0 || info.NumRedelivered > 0, nil
}

// announce publishes the decided event of a record that has just turned
// terminal, de-duplicated by event id within the stream's duplicate window.
//
// The decision is logged before it is announced, as every change is: an
// announced decision is a logged one, which the start-up sweep relies on
// (sweep.go). The waiting run is woken by the record write's copy, not by
// the announcement (orchestrator.Waiter).
func (a *Arbiter) announce(ctx context.Context, rec contracts.Record, rev uint64) error {
	if err := a.auditRecord(ctx, audit.ChangeDecided, &rec, rev); err != nil {
		return err
	}
	_, err := events.Publish(ctx, a.cfg.JS, contracts.DecidedSubject(rec.Request.EventID), decided(rec, rev),
		decidedMsgID(rec.Request.EventID), traceHeader(rec))
	return err
}

// traceHeader puts an outcome in the trace of the review that asked for it,
// so one trace runs from review to resume; nil without one (the decision's
// own trace is used then).
func traceHeader(rec contracts.Record) nats.Header {
	if !contracts.ValidTraceparent(rec.Request.Traceparent) {
		return nil
	}
	return nats.Header{contracts.HeaderTraceparent: []string{contracts.ChildTraceparent(rec.Request.Traceparent)}}
}

// reannounce publishes the decided event of a terminal record again when a
// vote or command that was already applied comes back (a redelivery after a
// crash between the record write and announce, or a resend), but only if no
// decided event exists yet for the approval. The check and the publish are one
// atomic step on the server (expected last sequence 0 for the subject), so
// neither a concurrent replica nor a resend after the duplicate window can
// store a second decided event, and a decision whose announce was lost is
// still announced.
func (a *Arbiter) reannounce(ctx context.Context, rec contracts.Record, rev uint64) error {
	if err := a.auditRecord(ctx, audit.ChangeDecided, &rec, rev); err != nil {
		return err
	}
	hdr := traceHeader(rec)
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	_, err := events.Publish(ctx, a.cfg.JS, contracts.DecidedSubject(rec.Request.EventID), decided(rec, rev),
		decidedMsgID(rec.Request.EventID), hdr)
	if isWrongLastSequence(err) {
		return nil // already announced
	}
	return err
}

func decidedMsgID(eventID string) string { return "decided:" + eventID }

// decided is the decided event of a terminal record at revision rev.
func decided(rec contracts.Record, rev uint64) contracts.Decided {
	req := rec.Request
	d := contracts.Decided{
		Spec: contracts.SpecDecided, EventID: req.EventID, Status: rec.Status, Agent: req.Run.Agent,
		RunID: req.Run.ID, Outcome: rec.Outcome, Revision: rev,
	}
	if rec.Outcome != nil {
		d.DecidedAt = rec.Outcome.DecidedAt
	}
	if req.ToolCall != nil {
		d.ToolName = req.ToolCall.Name
	}
	return d
}

// publishChanged announces a change of an approval. key tells one change
// from another of the same kind for the stream's de-duplication (see
// changedKey).
func (a *Arbiter) publishChanged(ctx context.Context, eventID string, ch *contracts.Changed, rev uint64, key string) error {
	ch.Spec = contracts.SpecChanged
	ch.EventID = eventID
	ch.Revision = rev
	ch.At = a.cfg.Now()
	id := "changed:" + eventID + ":" + ch.Change + ":" + key
	// The change is logged before it is announced: a failed announcement
	// is retried, and the log de-duplicates by the same id.
	if err := a.auditChange(ctx, eventID, ch, rev, id); err != nil {
		return err
	}
	_, err := events.Publish(ctx, a.cfg.JS, contracts.ChangedSubject(eventID), ch, id, nil)
	return err
}

// changedKey is what tells p's announcement apart (see publishChanged):
// the operation's own id, else its message's.
func changedKey(p *queuedOp) string {
	if p.o.changedID != "" {
		return p.o.changedID
	}
	return msgKey(p.msg)
}

// msgKey tells the announcements of one stored message apart from another's:
// its stream sequence.
func msgKey(msg jetstream.Msg) string {
	if md, err := msg.Metadata(); err == nil {
		return strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return ""
}

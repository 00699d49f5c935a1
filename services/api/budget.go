package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Budgets bound what one principal (the subject of a token) may take of the
// API, so that one token cannot take the server's memory or the approvers'
// attention from everyone else (DESIGN §6). A zero field takes its default
// (the Default* constants); a negative one turns that budget off. Over a
// budget the API answers 429 with Retry-After and the budget's code, and
// counts the refusal in countersign_budget_refusals_total{budget}.
type Budgets struct {
	// ReviewRate is how many requests per second one principal may make
	// that create approvals (POST /v1/reviews, POST /v1/questions), and
	// ReviewBurst how many it may make at once after a quiet spell (a
	// token bucket).
	ReviewRate  float64 `json:"review_rate" yaml:"review_rate"`
	ReviewBurst int     `json:"review_burst" yaml:"review_burst"`
	// VoteRate and VoteBurst are the same for votes (POST
	// /v1/approvals/{event_id}/votes; each vote of POST /v1/votes counts).
	VoteRate  float64 `json:"vote_rate" yaml:"vote_rate"`
	VoteBurst int     `json:"vote_burst" yaml:"vote_burst"`
	// StreamsPerPrincipal is how many live event streams (GET /v1/events and
	// the inbox's page feed) one principal may hold open at once.
	StreamsPerPrincipal int `json:"streams_per_principal" yaml:"streams_per_principal"`
	// PendingPerAgent is how many pending approvals one submitting
	// principal (an agent's token) may have at once, and PendingPerTenant
	// how many one tenant may have, whoever submitted them. A review that
	// would pass either is refused before anything is published.
	PendingPerAgent  int `json:"pending_per_agent" yaml:"pending_per_agent"`
	PendingPerTenant int `json:"pending_per_tenant" yaml:"pending_per_tenant"`
}

// Budget defaults.
const (
	DefaultReviewRate          = 100
	DefaultReviewBurst         = 1000
	DefaultVoteRate            = 20
	DefaultVoteBurst           = 200
	DefaultStreamsPerPrincipal = 16
	DefaultPendingPerAgent     = 1000
	DefaultPendingPerTenant    = 5000
)

// Error codes of an answer over a budget (HTTP 429, with Retry-After).
const (
	// CodeRateLimited: the principal made requests of this kind faster
	// than its rate (review_rate or vote_rate).
	CodeRateLimited = "rate_limited"
	// CodeTooManyStreams: the principal holds its most live event streams.
	CodeTooManyStreams = "too_many_streams"
	// CodePendingQuota: the review would take the submitter or the tenant
	// past its most pending approvals.
	CodePendingQuota = "pending_quota"
	// CodeTooManyConnections: the server (or the caller's address) holds
	// its most connections; answered by the listener before any request is
	// read.
	CodeTooManyConnections = "too_many_connections"
)

// Values of the budget label of countersign_budget_refusals_total.
const (
	BudgetReviewRate            = "review_rate"
	BudgetVoteRate              = "vote_rate"
	BudgetStreams               = "streams_per_principal"
	BudgetPendingAgent          = "pending_per_agent"
	BudgetPendingTenant         = "pending_per_tenant"
	BudgetConnections           = "max_connections"
	BudgetConnectionsPerAddress = "max_connections_per_address"
)

// NewBudgetRefusals returns the counter of requests and connections refused
// over a budget, by budget: countersign_budget_refusals_total. A process
// that also limits connections makes it once and hands it to Config.
func NewBudgetRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_budget_refusals_total",
		Help: "Requests and connections refused because a principal, an address or the server was over a budget, by budget.",
	}, []string{"budget"})
}

func (b *Budgets) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if b.ReviewRate == 0 {
		b.ReviewRate = DefaultReviewRate
	}
	if b.VoteRate == 0 {
		b.VoteRate = DefaultVoteRate
	}
	def(&b.ReviewBurst, DefaultReviewBurst)
	def(&b.VoteBurst, DefaultVoteBurst)
	def(&b.StreamsPerPrincipal, DefaultStreamsPerPrincipal)
	def(&b.PendingPerAgent, DefaultPendingPerAgent)
	def(&b.PendingPerTenant, DefaultPendingPerTenant)
}

// Validate checks the budgets after defaults: a rate needs a burst of at
// least one.
func (b Budgets) Validate() error {
	var errs []error
	if math.IsNaN(b.ReviewRate) || math.IsInf(b.ReviewRate, 0) || math.IsNaN(b.VoteRate) || math.IsInf(b.VoteRate, 0) {
		errs = append(errs, errors.New("review_rate and vote_rate must be numbers of requests per second"))
	}
	if b.ReviewRate > 0 && b.ReviewBurst < 1 {
		errs = append(errs, fmt.Errorf("review_burst must be at least 1 when review_rate is on, got %d", b.ReviewBurst))
	}
	if b.VoteRate > 0 && b.VoteBurst < 1 {
		errs = append(errs, fmt.Errorf("vote_burst must be at least 1 when vote_rate is on, got %d", b.VoteBurst))
	}
	return errors.Join(errs...)
}

// overBudget is the answer to a request over a budget: 429, Retry-After in
// whole seconds (at least 1), and the budget's code.
type overBudget struct {
	budget, code string
	retry        time.Duration
	message      string
}

func (s *Server) refuseOverBudget(w http.ResponseWriter, o *overBudget) {
	s.budgetRefusals.WithLabelValues(o.budget).Inc()
	e := errorf(http.StatusTooManyRequests, o.code, "%s", o.message)
	e.RetryAfter = retrySeconds(o.retry)
	w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	writeError(w, e)
}

// retrySeconds is d as a Retry-After value: whole seconds, rounded up, at
// least 1.
func retrySeconds(d time.Duration) int {
	return int(max(1, min(math.Ceil(d.Seconds()), math.MaxInt32)))
}

// rateLimiter is a token bucket per principal: each holds at most burst
// tokens and gains rate a second; a request takes one per unit of work.
// Buckets are kept per subject, which only an authenticated token gives,
// so their number is bounded by the tokens the server accepts.
type rateLimiter struct {
	budget string
	rate   float64 // tokens a second; <= 0: no limit
	burst  float64
	now    func() time.Time

	mu      sync.Mutex
	buckets map[string]*tokenBucket
}

type tokenBucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(budget string, rate float64, burst int, now func() time.Time) *rateLimiter {
	return &rateLimiter{budget: budget, rate: rate, burst: float64(burst), now: now, buckets: map[string]*tokenBucket{}}
}

// take takes n tokens from who's bucket (at most the whole bucket: work
// larger than the burst takes a full bucket). When there are too few it
// takes none and says how long until there would be enough.
func (l *rateLimiter) take(who string, n int) (ok bool, wait time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[who]
	if b == nil {
		b = &tokenBucket{tokens: l.burst, at: now}
		l.buckets[who] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
	}
	b.at = now
	need := min(float64(n), l.burst)
	if b.tokens >= need {
		b.tokens -= need
		return true, 0
	}
	short := need - b.tokens
	return false, time.Duration(short / l.rate * float64(time.Second))
}

// allow takes n tokens of p's rate budget, or answers 429 and returns false.
func (s *Server) allow(w http.ResponseWriter, l *rateLimiter, p *Principal, n int, what string) bool {
	ok, wait := l.take(p.Subject, n)
	if ok {
		return true
	}
	s.refuseOverBudget(w, &overBudget{budget: l.budget, code: CodeRateLimited, retry: wait,
		message: fmt.Sprintf("too many %s from this principal: at most %g a second (bursts of %g); retry after the time Retry-After gives", what, l.rate, l.burst)})
	return false
}

// streamSlots counts the live event streams of each principal.
type streamSlots struct {
	max  int // <= 0: no limit
	mu   sync.Mutex
	open map[string]int
}

// acquire takes a stream slot for who; release gives it back.
func (c *streamSlots) acquire(who string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.open[who] >= c.max {
		return nil, false
	}
	c.open[who]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open[who]--; c.open[who] <= 0 {
				delete(c.open, who)
			}
		})
	}, true
}

// streamRetry is the Retry-After of a stream refused over its budget.
const streamRetry = 5 * time.Second

// openStream takes one of p's live stream slots, or answers 429 through
// fail (with Retry-After set) and returns false.
func (s *Server) openStream(w http.ResponseWriter, p *Principal, fail func(*Error)) (release func(), ok bool) {
	release, ok = s.streams.acquire(p.Subject)
	if ok {
		return release, true
	}
	s.budgetRefusals.WithLabelValues(BudgetStreams).Inc()
	e := errorf(http.StatusTooManyRequests, CodeTooManyStreams,
		"this principal holds its most live event streams (%d); close one first", s.streams.max)
	e.RetryAfter = retrySeconds(streamRetry)
	w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	fail(e)
	return nil, false
}

// pendingQuota holds, besides what the records index counts, the approvals
// reviews in progress are about to create (reserved), and those they
// created that the index has not counted yet (awaiting): the index follows
// the bucket through a watch, a moment behind, so without them concurrent
// or back-to-back reviews could pass a quota together.
type pendingQuota struct {
	perAgent, perTenant int // <= 0: no limit
	mu                  sync.Mutex
	agents, tenants     map[string]int // reserved, by submitter and by tenant
	awaiting            map[string]pendingOwner
}

// pendingOwner is whose quota a created approval counts against until the
// index counts it.
type pendingOwner struct {
	submitter, tenant string
	since             time.Time
}

// pendingRetry is the Retry-After of a review over a pending quota: a
// pending approval ends when a person decides it or it expires.
const pendingRetry = 30 * time.Second

// pendingAwait bounds how long a created approval is counted while the
// index has not caught up with it.
const pendingAwait = 30 * time.Second

// reservePending reserves n new pending approvals for submitter in tenant,
// or answers 429 and returns false. release ends the reservation once the
// review is done, with the ids of the approvals it created: those count
// until the index does.
func (s *Server) reservePending(w http.ResponseWriter, submitter, tenant string, n int) (release func(created ...string), ok bool) {
	q := s.pending
	if n == 0 || (q.perAgent <= 0 && q.perTenant <= 0) {
		return func(...string) {}, true
	}
	q.mu.Lock()
	agentHas, tenantHas := s.index.pendingOf(submitter, tenant)
	agentHas += q.agents[submitter]
	tenantHas += q.tenants[tenant]
	now := time.Now()
	for id, o := range q.awaiting {
		if s.index.has(id) || now.Sub(o.since) > pendingAwait {
			delete(q.awaiting, id)
			continue
		}
		if o.submitter == submitter {
			agentHas++
		}
		if o.tenant == tenant {
			tenantHas++
		}
	}
	var o *overBudget
	switch {
	case q.perAgent > 0 && agentHas+n > q.perAgent:
		o = &overBudget{budget: BudgetPendingAgent, code: CodePendingQuota, retry: pendingRetry,
			message: fmt.Sprintf("this principal has %d pending approvals; at most %d may be pending at once (this review adds %d)", agentHas, q.perAgent, n)}
	case q.perTenant > 0 && tenantHas+n > q.perTenant:
		o = &overBudget{budget: BudgetPendingTenant, code: CodePendingQuota, retry: pendingRetry,
			message: fmt.Sprintf("the tenant has %d pending approvals; at most %d may be pending at once (this review adds %d)", tenantHas, q.perTenant, n)}
	}
	if o != nil {
		q.mu.Unlock()
		s.refuseOverBudget(w, o)
		return nil, false
	}
	q.agents[submitter] += n
	q.tenants[tenant] += n
	q.mu.Unlock()
	var once sync.Once
	return func(created ...string) {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.agents[submitter] -= n; q.agents[submitter] <= 0 {
				delete(q.agents, submitter)
			}
			if q.tenants[tenant] -= n; q.tenants[tenant] <= 0 {
				delete(q.tenants, tenant)
			}
			for _, id := range created {
				if id != "" && !s.index.has(id) {
					q.awaiting[id] = pendingOwner{submitter: submitter, tenant: tenant, since: time.Now()}
				}
			}
		})
	}, true
}

// newApprovals is about how many pending approvals a review of calls may
// create: the calls the policy in force gates (neither allows nor denies),
// less those that re-attach to a record the index holds. A call a standing
// grant will allow is counted too: the quota errs on the side of refusing.
func (s *Server) newApprovals(run contracts.Run, calls []orchestrator.ToolCall) int {
	pol := s.cfg.Gate.Policy()
	n := 0
	for _, c := range calls {
		if run.ID != "" && c.ID != "" && s.index.has(orchestrator.EventID(run, c.ID)) {
			continue
		}
		args := c.Arguments
		if t := strings.TrimSpace(string(args)); t == "" || t == "null" {
			args = json.RawMessage(`{}`)
		}
		switch pol.Evaluate(policy.Input{Run: run, Tool: c.Name, Arguments: args}).Action {
		case policy.ActionAllow, policy.ActionDeny:
			continue
		}
		n++
	}
	return n
}

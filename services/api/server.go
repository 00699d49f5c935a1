package api

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/tracing"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/orchestrator"
)

// Server is the HTTP API. Create it with New, serve Handler, stop it with Close.
type Server struct {
	cfg Config
	log *slog.Logger
	kv  jetstream.KeyValue
	// events is the event stream, for timelines.
	events *events.StreamHandle
	// feed fans the live events out to every open event stream.
	feed   *feed
	tokens []tokenEntry
	index  *index
	m      *metrics
	// votes sends the votes cast here to the arbiter.
	votes events.VoteSender

	// Budgets per principal (budget.go).
	budgetRefusals       *prometheus.CounterVec
	reviewRate, voteRate *rateLimiter
	streams              *streamSlots
	pending              *pendingQuota
	// receipts reads the receipts of accepted claims for their claimants.
	receipts *orchestrator.Receipts
	// scrape checks the scrape tokens of /metrics.
	scrape func(sum [32]byte) bool
	// bearer verifies an identity provider's tokens (SetBearerVerifier).
	bearer atomic.Pointer[BearerVerifier]

	handler http.Handler
	mux     *http.ServeMux

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	// noSigner is logged once: a review allowed a call with a receipt
	// while this API holds no signing key.
	noSigner sync.Once
	// push is the Web Push subscriptions bucket, opened on first use.
	pushMu sync.Mutex
	push   *push.Store
	// The directory this server last published (see directory.go).
	dirMu      sync.Mutex
	dirVersion string
	dirPoke    chan struct{}
	// uses is the hitl_receipt_uses bucket (receiptuses.go).
	uses receiptUses
	// pk is the passkey side (passkeys.go).
	pk passkeys
}

//go:embed openapi.json
var openAPIDocument []byte

// New validates cfg, opens the approvals bucket and starts the records
// index (one watch of the bucket) that backs listing and the pending gauge.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("api: open bucket %s: %w", contracts.BucketApprovals, err)
	}
	s := &Server{
		events:   &events.StreamHandle{JS: cfg.JS, Name: contracts.StreamEvents},
		receipts: &orchestrator.Receipts{JS: cfg.JS},
		cfg:      cfg,
		log:      cfg.Logger,
		kv:       kv,
		tokens:   newTokenEntries(cfg.Tokens),
		done:     make(chan struct{}),
		dirPoke:  make(chan struct{}, 1),
	}
	s.feed = newFeed(s)
	s.index = newIndex(kv, cfg.JS, cfg.IndexRecent, cfg.Logger)
	s.index.pageBudget = cfg.HistoryPageBudget
	s.index.snapshotPath = cfg.IndexSnapshot
	if cfg.Waiter != nil {
		s.index.observe = cfg.Waiter.Observe
	}
	if s.m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	s.scrape = ScrapeTokens(cfg.MetricsTokens)
	b := cfg.Budgets
	s.reviewRate = newRateLimiter(BudgetReviewRate, b.ReviewRate, b.ReviewBurst, cfg.Now)
	s.voteRate = newRateLimiter(BudgetVoteRate, b.VoteRate, b.VoteBurst, cfg.Now)
	s.streams = &streamSlots{max: b.StreamsPerPrincipal, open: map[string]int{}}
	s.pending = &pendingQuota{perAgent: b.PendingPerAgent, perTenant: b.PendingPerTenant, agents: map[string]int{}, tenants: map[string]int{}, awaiting: map[string]pendingOwner{}}
	if s.budgetRefusals = cfg.BudgetRefusals; s.budgetRefusals == nil {
		s.budgetRefusals = NewBudgetRefusals()
		if err := cfg.Registerer.Register(s.budgetRefusals); err != nil {
			return nil, fmt.Errorf("api: register the budget metric: %w", err)
		}
	}
	if err := cfg.Registerer.Register(newRecordsCollector(s)); err != nil {
		return nil, fmt.Errorf("api: register the oversight metrics: %w", err)
	}
	// Every role judges votes and commands by the directory published
	// here: without it the arbiter would know nobody's tenants or roles.
	if _, err := s.PublishDirectory(ctx); err != nil {
		return nil, err
	}
	if err := s.publishParty(ctx); err != nil {
		return nil, err
	}
	if err := s.index.start(ctx); err != nil {
		return nil, err
	}
	go s.watchDirectory()
	s.routes()
	return s, nil
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends open event streams and stops the records index. Requests in
// progress finish on their own; the caller shuts the HTTP server down.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.feed.close()
		s.closeErr = s.index.stop()
	})
	return s.closeErr
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	// Reads are open to every token; writes need a role (admin has all).
	mux.HandleFunc("POST /v1/reviews", s.authed(s.postReviews, RoleAgent))
	mux.HandleFunc("POST /v1/questions", s.authed(s.postQuestions, RoleAgent))
	mux.HandleFunc("GET /v1/tools/request_human_input", s.getRequestHumanInputTool)
	mux.HandleFunc("GET /v1/approvals", s.authed(s.listApprovals))
	mux.HandleFunc("GET /v1/approvals/{event_id}", s.authed(s.getApproval))
	mux.HandleFunc("POST /v1/approvals/{event_id}/votes", s.authed(s.postVote, RoleApprover))
	mux.HandleFunc("POST /v1/votes", s.authed(s.postVotes, RoleApprover))
	mux.HandleFunc("POST /v1/approvals/{event_id}/cancel", s.authed(s.postCancel, RoleApprover, RoleAgent))
	mux.HandleFunc("POST /v1/approvals/{event_id}/extend", s.authed(s.postExtend, RoleApprover))
	mux.HandleFunc("POST /v1/approvals/{event_id}/claim", s.authed(s.postClaim, RoleAgent))
	mux.HandleFunc("POST /v1/approvals/{event_id}/outcome", s.authed(s.postOutcome, RoleAgent))
	mux.HandleFunc("GET /v1/approvals/{event_id}/events", s.authed(s.getTimeline))
	mux.HandleFunc("GET /v1/events", s.authed(s.getEvents))
	mux.HandleFunc("GET /v1/grants", s.authed(s.listGrants))
	mux.HandleFunc("GET /v1/grants/{grant_id}", s.authed(s.getGrant))
	mux.HandleFunc("POST /v1/grants/{grant_id}/revoke", s.authed(s.postRevokeGrant, RoleApprover))
	mux.HandleFunc("GET /v1/grants/{grant_id}/events", s.authed(s.getGrantTimeline))
	mux.HandleFunc("GET /v1/policy", s.authed(s.getPolicy))
	mux.HandleFunc("POST /v1/policy", s.authed(s.postPolicy, RoleAdmin))
	mux.HandleFunc("POST /v1/policy/replay", s.authed(s.postPolicyReplay, ReplayRoles...))
	mux.HandleFunc("GET /v1/oversight", s.authed(s.getOversight, OversightRoles...))
	mux.HandleFunc("GET /v1/audit/export", s.authed(s.getAuditExport, AuditLogRoles...))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", MetricsHandler(s.cfg.Gatherer, s.cfg.Metrics, s.mayScrape))
	mux.HandleFunc("GET /openapi.json", s.openAPI)
	mux.HandleFunc("GET /.well-known/jwks.json", s.getJWKS)
	mux.HandleFunc("POST /v1/receipts/use", s.authed(s.postReceiptUse))
	mux.HandleFunc("GET /v1/passkeys", s.authed(s.getPasskeys))
	mux.HandleFunc("POST /v1/passkeys/{credential_id}/revoke", s.authed(s.postRevokePasskey))
	mux.HandleFunc("POST /v1/approvals/{event_id}/statement", s.authed(s.postStatement, RoleApprover))
	mux.HandleFunc("GET /.well-known/countersign-approvers", s.getApprovers)
	mux.HandleFunc("GET /v1/push/key", s.getPushKey)
	mux.HandleFunc("POST /v1/push/subscriptions", s.authed(s.postPushSubscription))
	mux.HandleFunc("GET /v1/push/subscriptions", s.authed(s.getPushSubscriptions))
	mux.HandleFunc("DELETE /v1/push/subscriptions/{id}", s.authed(s.deletePushSubscription))
	mux.HandleFunc("POST /v1/push/actions", s.postPushAction)
	s.mux = mux
	s.handler = s.observe(s.recoverPanics(http.HandlerFunc(s.route)))
}

// route dispatches to the mux, answering unknown routes and wrong methods
// with JSON errors instead of the mux's plain text.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	cw := &captureWriter{header: w.Header()}
	h.ServeHTTP(cw, r)
	switch cw.status {
	case http.StatusMethodNotAllowed:
		writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound, 0:
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
	default:
		// A redirect to the clean form of the path.
		w.WriteHeader(cw.status)
	}
}

// captureWriter records the status of the mux's own answers and drops their body.
type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return len(b), nil
}
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

// loggingWriter records the status for metrics and logs.
type loggingWriter struct {
	http.ResponseWriter
	status int
	token  string
}

func (l *loggingWriter) WriteHeader(code int) {
	if l.status == 0 {
		l.status = code
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *loggingWriter) Write(b []byte) (int, error) {
	if l.status == 0 {
		l.status = http.StatusOK
	}
	return l.ResponseWriter.Write(b)
}

func (l *loggingWriter) Unwrap() http.ResponseWriter { return l.ResponseWriter }

// Flush lets event streams push each event at once.
func (l *loggingWriter) Flush() {
	if l.status == 0 {
		l.status = http.StatusOK
	}
	_ = http.NewResponseController(l.ResponseWriter).Flush()
}

// observe counts and times every request by route pattern and logs it.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The caller's trace, or a new one: requests and votes published
		// while serving carry it on the bus, and the answer names it.
		tp := r.Header.Get(contracts.HeaderTraceparent)
		ctx, span := s.reviewSpan(r, tp)
		defer span.End()
		switch {
		case tracing.Traceparent(span) != "":
			tp = tracing.Traceparent(span) // what follows joins the exported span
		case contracts.ValidTraceparent(tp):
			tp = contracts.ChildTraceparent(tp)
		default:
			tp = contracts.NewTraceparent()
		}
		r = r.WithContext(contracts.WithTraceparent(ctx, tp))
		w.Header().Set(contracts.HeaderTraceparent, tp)
		lw := &loggingWriter{ResponseWriter: w}
		next.ServeHTTP(lw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		status := lw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		elapsed := time.Since(start)
		s.m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		s.m.duration.WithLabelValues(route).Observe(elapsed.Seconds())
		s.log.Debug("http request", "method", r.Method, "route", route, "status", status,
			"duration", elapsed, "token_name", lw.token, "trace_id", contracts.TraceID(tp))
	})
}

// reviewSpan starts the review span of POST /v1/reviews, a child of the
// agent's traceparent tp; other requests get a span that records nothing.
func (s *Server) reviewSpan(r *http.Request, tp string) (context.Context, trace.Span) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/reviews" {
		return r.Context(), trace.SpanFromContext(r.Context())
	}
	return tracing.Start(r.Context(), tracing.SpanReview, tp)
}

// recoverPanics turns a panic in a handler into a 500 answer.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if lw, ok := w.(*loggingWriter); ok && lw.status != 0 {
				// The answer has started; the connection is cut instead.
				panic(http.ErrAbortHandler)
			}
			writeError(w, errorf(http.StatusInternalServerError, CodeInternal, "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if nc := s.cfg.JS.Conn(); nc == nil || !nc.IsConnected() {
		writeError(w, errorf(http.StatusServiceUnavailable, CodeNotReady, "not connected to NATS"))
		return
	}
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			writeError(w, errorf(http.StatusServiceUnavailable, CodeNotReady, "not ready: %v", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDocument)
}

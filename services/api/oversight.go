package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/services/api/oversight"
	"github.com/nats-io/nats.go/jetstream"
)

// The oversight view (GET /v1/oversight, the inbox's /oversight page, the
// countersign_oversight_* metrics) is computed by package oversight from
// what the records index keeps of each record: no record is read from the
// bucket to answer it.

// overseen is what the records index keeps of a record for the oversight
// figures, beside its summary.
type overseen struct {
	rule, risk string
	votes      []oversight.Vote
	timedOut   bool
	shadow     []oversight.Shadow
	// channel decided the record after decidedAfter (notifier.DecisionChannel).
	channel      string
	decidedAfter time.Duration
	claimed      bool
	execution    string
	review       *oversight.Review
}

// overseenJSON and overseenRequestJSON are the parts of a record the index
// decodes for the oversight figures.
type overseenJSON struct {
	Votes []struct {
		Decision  string             `json:"decision"`
		Approver  contracts.Approver `json:"approver"`
		DecidedAt time.Time          `json:"decided_at"`
	} `json:"votes"`
	Outcome *struct {
		DecidedBy []string  `json:"decided_by"`
		DecidedAt time.Time `json:"decided_at"`
	} `json:"outcome"`
	Claim     *struct{} `json:"claim"`
	Execution *struct {
		Status string `json:"status"`
	} `json:"execution"`
	Review *struct {
		Reviewer     string `json:"reviewer"`
		ApproveBelow int    `json:"approve_below"`
		Opinion      *struct {
			Score *int `json:"score"`
		} `json:"opinion"`
		Effect string `json:"effect"`
	} `json:"review"`
}

type overseenRequestJSON struct {
	Risk   string `json:"risk"`
	Policy struct {
		Rule string `json:"rule"`
	} `json:"policy"`
	Shadow []struct {
		Rule   string `json:"rule"`
		Action string `json:"action"`
	} `json:"shadow"`
}

// overseenOf is what the index keeps of a decoded record for oversight.
func overseenOf(sj *summaryJSON) overseen {
	o := overseen{rule: sj.Request.Policy.Rule, risk: sj.Request.Risk}
	if len(sj.Votes) > 0 {
		o.votes = make([]oversight.Vote, len(sj.Votes))
		for i, v := range sj.Votes {
			o.votes[i] = oversight.Vote{Approver: v.Approver.ID, Decision: v.Decision, DecidedAt: v.DecidedAt}
		}
	}
	if sj.Outcome != nil {
		o.timedOut = slices.Contains(sj.Outcome.DecidedBy, contracts.DecidedByTimeout)
	}
	o.channel, o.decidedAfter = decidedVia(sj)
	o.claimed = sj.Claim != nil
	if sj.Execution != nil {
		o.execution = sj.Execution.Status
	}
	if rv := sj.Review; rv != nil {
		o.review = &oversight.Review{Reviewer: rv.Reviewer, ApproveBelow: rv.ApproveBelow, Given: rv.Opinion != nil, Effect: rv.Effect}
		if rv.Opinion != nil {
			o.review.Score = rv.Opinion.Score
		}
	}
	for i, sh := range sj.Request.Shadow {
		if i == contracts.MaxShadowVerdicts {
			break
		}
		o.shadow = append(o.shadow, oversight.Shadow{Rule: sh.Rule, Action: sh.Action})
	}
	return o
}

// decidedVia is the channel that decided a record and how long after its
// request, as notifier.DecisionChannel and TimeToDecision say of it ("", 0
// while it is pending).
func decidedVia(sj *summaryJSON) (string, time.Duration) {
	if !contracts.Terminal(sj.Status) {
		return "", 0
	}
	rec := &contracts.Record{Status: sj.Status, Request: contracts.ApprovalRequested{CreatedAt: sj.Request.CreatedAt}}
	if sj.Outcome != nil {
		rec.Outcome = &contracts.Outcome{DecidedBy: sj.Outcome.DecidedBy, DecidedAt: sj.Outcome.DecidedAt}
	}
	rec.Votes = make([]contracts.Vote, len(sj.Votes))
	for i, v := range sj.Votes {
		rec.Votes[i] = contracts.Vote{Approver: v.Approver, DecidedAt: v.DecidedAt}
	}
	return notifier.DecisionChannel(rec), notifier.TimeToDecision(rec)
}

// overseen returns the requests created in o's window that reader may read.
func (ix *index) overseen(reader approval.Reader, o oversight.Options) []oversight.Request {
	var out []oversight.Request
	ix.eachOverseen(reader, o, func(r *oversight.Request) { out = append(out, *r) })
	return out
}

// eachOverseen calls fn with each request of o's window reader may read,
// newest first, under the index's lock. fn must not keep r: it is reused.
func (ix *index) eachOverseen(reader approval.Reader, o oversight.Options, fn func(r *oversight.Request)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var r oversight.Request
	for _, s := range ix.order { // newest first
		if s.createdAt.Before(o.Since) {
			break
		}
		if !o.InWindow(s.createdAt) || !s.canRead(reader) {
			continue
		}
		r = oversight.Request{
			EventID: s.eventID, Rule: s.over.rule, Risk: s.over.risk, CreatedAt: s.createdAt,
			Approvers: s.approvers, Votes: s.over.votes, TimedOut: s.over.timedOut, Shadow: s.over.shadow,
			Status: s.status, Channel: s.over.channel, DecidedAfter: s.over.decidedAfter,
			Claimed: s.over.claimed, Execution: s.over.execution, Review: s.over.review,
		}
		fn(&r)
	}
}

// OversightRoles may see the oversight view: admins, viewers and auditors.
var OversightRoles = []string{RoleViewer, RoleAuditor}

// OversightQuery selects an oversight report's window.
type OversightQuery struct {
	// Since starts the window (default: oversight.DefaultWindow ago).
	Since time.Time
	// Fast is the fast-decision threshold (default: oversight.DefaultFast).
	Fast time.Duration
}

// Oversight returns the oversight figures over the requests p may read
// (approval.CanRead) created since q.Since: what GET /v1/oversight
// answers. Only admins, viewers and auditors may see them (forbidden).
func (s *Server) Oversight(ctx context.Context, p Principal, q OversightQuery) (*oversight.Report, *Error) {
	if !p.Has(OversightRoles...) {
		return nil, errorf(http.StatusForbidden, CodeForbidden, "the oversight view is for admins, viewers and auditors (one of: %s)", strings.Join(append([]string{RoleAdmin}, OversightRoles...), ", "))
	}
	if err := s.Settle(ctx); err != nil {
		s.log.Warn("records index is behind the bucket; oversight over what it holds", "err", err)
	}
	now := s.cfg.Now().UTC()
	if q.Since.IsZero() {
		q.Since = now.Add(-oversight.DefaultWindow)
	}
	o := oversight.Options{Since: q.Since.UTC(), Fast: q.Fast}
	rep := oversight.Compute(s.index.overseen(p.Reader(), o), o)
	rep.Until = now
	rep.Partial = !s.index.leftOutSince().Before(o.Since)
	oversight.AddGrants(&rep, s.overseenGrants(ctx, &p))
	return &rep, nil
}

// getOversight serves GET /v1/oversight?since=&fast=.
func (s *Server) getOversight(w http.ResponseWriter, r *http.Request) {
	q, aerr := ParseOversightQuery(r.URL.Query().Get("since"), r.URL.Query().Get("fast"), s.cfg.Now())
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	rep, aerr := s.Oversight(r.Context(), *principalFrom(r.Context()), q)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// maxFast bounds the fast-decision threshold.
const maxFast = 24 * time.Hour

// ParseOversightQuery reads the since and fast parameters of an oversight
// request: since is an RFC 3339 time or an age ("30d", "12h", "90m"),
// fast a duration ("10s"); empty means the default.
func ParseOversightQuery(since, fast string, now time.Time) (OversightQuery, *Error) {
	var q OversightQuery
	if since != "" {
		if t, err := time.Parse(time.RFC3339, since); err == nil {
			q.Since = t
		} else if d, ok := parseAge(since); ok {
			q.Since = now.Add(-d)
		} else {
			return q, fieldError(http.StatusBadRequest, CodeInvalidParameter, "since",
				"since must be an RFC 3339 time or an age such as 30d, 12h or 90m, not %q", since)
		}
	}
	if fast != "" {
		d, err := time.ParseDuration(fast)
		if err != nil || d <= 0 || d > maxFast {
			return q, fieldError(http.StatusBadRequest, CodeInvalidParameter, "fast",
				"fast must be a duration above 0 and at most 24h, such as 10s, not %q", fast)
		}
		q.Fast = d
	}
	return q, nil
}

// parseAge reads a positive age: a Go duration, or a whole number of days
// ("30d").
func parseAge(s string) (time.Duration, bool) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 3660 {
			return 0, false
		}
		return time.Duration(n) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

// overseenGrants are the grants p may see, with the number of calls each
// has allowed: one stream info request counts the uses of every grant
// (the messages on hitl.grant.used.<grant_id>). Without a grant book, or
// when the count cannot be read, the uses are left at zero and logged.
func (s *Server) overseenGrants(ctx context.Context, p *Principal) []oversight.Grant {
	if s.cfg.Gate == nil || s.cfg.Gate.Grants() == nil {
		return nil
	}
	views := s.Grants(ctx, p, "all", "", "")
	if len(views) == 0 {
		return nil
	}
	uses := map[string]uint64{}
	if st, err := s.cfg.JS.Stream(ctx, contracts.StreamEvents); err != nil {
		s.log.Warn("oversight: grant uses could not be counted", "err", err)
	} else if info, err := st.Info(ctx, jetstream.WithSubjectFilter(contracts.SubjectGrantUsedPrefix+">")); err != nil {
		s.log.Warn("oversight: grant uses could not be counted", "err", err)
	} else {
		uses = info.State.Subjects
	}
	out := make([]oversight.Grant, 0, len(views))
	for _, v := range views {
		out = append(out, oversight.Grant{Rule: v.Policy.Rule, GrantedBy: v.GrantedBy, GrantedAt: v.GrantedAt,
			Uses: int(uses[contracts.GrantUsedSubject(v.GrantID)])})
	}
	return out
}

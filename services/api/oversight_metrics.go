package api

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/services/api/oversight"
)

// The oversight metrics are the oversight view's figures over every record
// (the default window, oversight.DefaultWindow, and threshold,
// oversight.DefaultFast), computed at each scrape from the records index.
// They are gauges of a window, not counters: every API replica reports the
// same values (aggregate replicas with max, not sum), and a record that
// leaves the window leaves the figures. They are labelled by rule and
// risk, never by approver: people are unbounded as label values, and
// /metrics is not scoped by who may read which request, while per-person
// figures are served only to admins, viewers and auditors, over what they
// may read (GET /v1/oversight, the inbox's /oversight page).
//
// Grants issued and used under a rule are counted where grants are issued
// and used (countersign_grants_issued_total{rule},
// countersign_grant_uses_total{rule}); the oversight view adds them beside
// the rule's figures here once they exist.

// oversightBuckets bound the time-to-decide histogram, in seconds: from a
// glance (1 s) to the default timeout (24 h).
var oversightBuckets = []float64{1, 2, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600}

// recordsCollector reports the figures computed from the records index at
// each scrape: the pending approvals and the oversight figures.
type recordsCollector struct {
	s *Server

	pending *prometheus.Desc

	requests, decisions, fast, expired, median, p90, window, threshold *prometheus.Desc
	timeToDecide                                                       *prometheus.Desc
}

func newRecordsCollector(s *Server) *recordsCollector {
	// Full names, written out, so that a search of the code finds each.
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &recordsCollector{
		s:            s,
		pending:      d("countersign_pending_approvals", "Approvals waiting for a decision."),
		requests:     d("countersign_oversight_requests", "Approval requests created in the oversight window, by rule and risk.", "rule", "risk"),
		decisions:    d("countersign_oversight_decisions", "Counted votes on the requests of the oversight window, by rule, risk and decision.", "rule", "risk", "decision"),
		timeToDecide: d("countersign_oversight_time_to_decide_seconds", "Time from a request's creation to each counted vote on it, over the requests of the oversight window, by rule and risk.", "rule", "risk"),
		fast:         d("countersign_oversight_fast_decisions", "Votes on high and critical risk requests of the oversight window made faster than the fast-decision threshold, by rule and risk.", "rule", "risk"),
		expired:      d("countersign_oversight_expired_undecided", "Requests of the oversight window that time decided (expired, or approved by on_timeout: approve), by rule and risk.", "rule", "risk"),
		median:       d("countersign_oversight_time_to_decide_median_seconds", "Median time to decide of the oversight window, by rule.", "rule"),
		p90:          d("countersign_oversight_time_to_decide_p90_seconds", "90th percentile of the time to decide of the oversight window, by rule.", "rule"),
		window:       d("countersign_oversight_window_seconds", "Length of the oversight window the countersign_oversight_* figures cover."),
		threshold:    d("countersign_oversight_fast_threshold_seconds", "Threshold below which a decision on a high or critical risk request counts as fast."),
	}
}

func (c *recordsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.requests, c.decisions, c.timeToDecide, c.fast, c.expired, c.median, c.p90, c.window, c.threshold} {
		ch <- d
	}
}

// Collect catches the records index up with the bucket first, once per
// scrape, so that its figures are the bucket's as of the scrape, as a
// listing's are (bounded well inside a scrape's timeout; past it, they are
// over what the index holds).
func (c *recordsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := c.s.index.catchUp(ctx); err != nil {
		c.s.log.Warn("records index is behind the bucket; metrics over what it holds", "err", err)
	}
	cancel()
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, c.s.index.pendingCount())
	o := oversight.Options{Since: c.s.cfg.Now().Add(-oversight.DefaultWindow), Fast: oversight.DefaultFast}
	// One pass over the window, holding no copy of it: a scrape's cost is
	// the pass and the times to decide, not a report of every row.
	t := oversight.NewTally(o)
	c.s.index.eachOverseen(approval.Reader{Admin: true}, o, t.Add)
	ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, oversight.DefaultWindow.Seconds())
	ch <- prometheus.MustNewConstMetric(c.threshold, prometheus.GaugeValue, o.Fast.Seconds())

	// Per rule: the exact median and p90, as the JSON has them.
	for _, r := range t.Rules() {
		if r.TimeToDecide != nil {
			ch <- prometheus.MustNewConstMetric(c.median, prometheus.GaugeValue, r.TimeToDecide.Median, r.Rule)
			ch <- prometheus.MustNewConstMetric(c.p90, prometheus.GaugeValue, r.TimeToDecide.P90, r.Rule)
		}
	}
	// Per rule and risk.
	keys, rows := t.Groups()
	for i, k := range keys {
		st := rows[i]
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(st.Requests), k.Rule, k.Risk)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.GaugeValue, float64(st.ExpiredUndecided), k.Rule, k.Risk)
		for _, dec := range []string{contracts.DecisionApprove, contracts.DecisionEdit, contracts.DecisionReject, contracts.DecisionRespond, contracts.DecisionAnswer} {
			if n := st.ByDecision[dec]; n > 0 {
				ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.GaugeValue, float64(n), k.Rule, k.Risk, dec)
			}
		}
		if oversight.HighRisk(k.Risk) {
			ch <- prometheus.MustNewConstMetric(c.fast, prometheus.GaugeValue, float64(st.FastHighRisk), k.Rule, k.Risk)
		}
		secs := st.Seconds()
		buckets := make(map[float64]uint64, len(oversightBuckets))
		sum := 0.0
		for _, x := range secs {
			sum += x
		}
		for _, b := range oversightBuckets {
			j, _ := slices.BinarySearch(secs, b) // secs is sorted: first index ≥ b
			for j < len(secs) && secs[j] == b {
				j++ // le: a time equal to the bound is in its bucket
			}
			buckets[b] = uint64(j)
		}
		ch <- prometheus.MustNewConstHistogram(c.timeToDecide, uint64(len(secs)), sum, buckets, k.Rule, k.Risk)
	}
}

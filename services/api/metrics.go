package api

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	votes    *prometheus.CounterVec
}

// newMetrics registers the API's request metrics; the figures computed
// from the records index at each scrape are recordsCollector's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_http_requests_total",
			Help: "HTTP requests answered by the API, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern (long polls and streams included).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_api_votes_total",
			Help: "Votes received over HTTP, by result: counted, a refusal reason, in_flight, unknown_event or error.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.votes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

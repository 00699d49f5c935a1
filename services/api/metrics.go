package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// Who may read GET /metrics (Config.Metrics). The metrics count every
// tenant's requests, so they are not for every token.
const (
	// MetricsToken: a bearer token is required, an admin's or one of the
	// scrape tokens (Config.MetricsTokens). The default.
	MetricsToken = "token"
	// MetricsOpen: anyone who reaches the server reads them.
	MetricsOpen = "open"
	// MetricsOff: not served here (another listener serves them).
	MetricsOff = "off"
)

// MetricsHandler serves g's metrics as access says; allowed reports
// whether the SHA-256 of a bearer token may read them (MetricsToken).
func MetricsHandler(g prometheus.Gatherer, access string, allowed func(sum [sha256.Size]byte) bool) http.Handler {
	metrics := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch access {
		case MetricsOpen:
			metrics.ServeHTTP(w, r)
			return
		case MetricsOff:
			writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="countersign"`)
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthenticated, "a bearer token is required for /metrics (an admin's or a scrape token, metrics.tokens)"))
			return
		}
		if !allowed(sha256.Sum256([]byte(token))) {
			writeError(w, errorf(http.StatusForbidden, CodeForbidden, "this token may not read /metrics (an admin's or a scrape token, metrics.tokens, may)"))
			return
		}
		metrics.ServeHTTP(w, r)
	})
}

// ScrapeTokens returns a check of a token's SHA-256 against hashes (lowercase
// hex), in constant time over the whole list.
func ScrapeTokens(hashes []string) func(sum [sha256.Size]byte) bool {
	raw := make([][]byte, 0, len(hashes))
	for _, h := range hashes {
		if b, err := hex.DecodeString(h); err == nil && len(b) == sha256.Size {
			raw = append(raw, b)
		}
	}
	return func(sum [sha256.Size]byte) bool {
		found := 0
		for _, b := range raw {
			found |= subtle.ConstantTimeCompare(sum[:], b)
		}
		return found == 1
	}
}

// mayScrape reports whether the token with SHA-256 sum may read /metrics
// on the API: a scrape token, or an admin's.
func (s *Server) mayScrape(sum [sha256.Size]byte) bool {
	if s.scrape(sum) {
		return true
	}
	p := s.authenticateSum(sum)
	return p != nil && slices.Contains(p.Roles, RoleAdmin)
}

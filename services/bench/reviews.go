package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/api"
)

// ReviewsConfig says how to measure POST /v1/reviews for calls the policy
// allows.
type ReviewsConfig struct {
	// Dir is the parent of each repetition's store.
	Dir string
	// Sync is SyncAlways (the default, as serve) or SyncLazy.
	Sync string
	// Duration of each timed measurement (default 3 s).
	Duration time.Duration
	// Count is the repetitions, each on a fresh server (default 3).
	Count int
	// Clients is the concurrent clients of the throughput measurement
	// (default 32).
	Clients int
	Out     io.Writer
}

// ReviewsReport is the allowed call's figures: medians over the
// repetitions, each with its range.
type ReviewsReport struct {
	Sync        string `json:"sync"`
	Clients     int    `json:"clients"`
	Repetitions int    `json:"repetitions"`
	// Allowed is POST /v1/reviews of one call the policy allows, over
	// loopback HTTP with an agent's token.
	Allowed ReviewsFigures `json:"allowed"`
	// Health is GET /healthz on the same server: HTTP and the listener
	// without authentication, policy or NATS (the baseline).
	Health ReviewsFigures `json:"health"`
	// SyncPublishP50Ms is one JetStream publish waiting for its ack on the
	// same server (the cost of one persisted write), p50.
	SyncPublishP50Ms [3]float64 `json:"sync_publish_p50_ms"`
	// AsyncPublishPerSec is JetStream publishes a second with a window of
	// acks in flight on the same server: an allowed call publishes its
	// history fact this way.
	AsyncPublishPerSec [3]float64 `json:"async_publish_per_sec"`
}

// ReviewsFigures are one request kind's figures, each [median, min, max].
type ReviewsFigures struct {
	// PerSec is requests per second with Clients clients.
	PerSec [3]float64 `json:"per_sec"`
	// P50Ms and P99Ms are one client's latencies, one request at a time.
	P50Ms [3]float64 `json:"p50_ms"`
	P99Ms [3]float64 `json:"p99_ms"`
}

// reviewsPolicy allows the bench's tool and gates everything else.
const reviewsPolicy = `version: "bench-allowed"
default: require_approval
rules:
  - name: reads
    tools: ["crm.read_*"]
    action: allow
`

// reviewSample is one repetition's figures.
type reviewSample struct {
	allowedRate, allowedP50, allowedP99 float64
	healthRate, healthP50, healthP99    float64
	publishP50, asyncRate               float64
}

// Reviews measures the allowed call's path through the HTTP API.
func Reviews(ctx context.Context, cfg ReviewsConfig) (*ReviewsReport, error) {
	if cfg.Sync == "" {
		cfg.Sync = SyncAlways
	}
	if cfg.Sync != SyncAlways && cfg.Sync != SyncLazy {
		return nil, fmt.Errorf("bench: reviews: ReviewsConfig.Sync must be always or lazy, got %q", cfg.Sync)
	}
	cfg.Duration = cmp0(cfg.Duration, DefaultDuration)
	cfg.Count, cfg.Clients = max(cfg.Count, 1), max(cfg.Clients, 1)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	var samples []reviewSample
	for r := range cfg.Count {
		s, err := measureReviews(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: reviews, repetition %d: %w", r+1, err)
		}
		fmt.Fprintf(cfg.Out, "reviews %d/%d: allowed %.0f/s (%d clients), p50 %.3f ms; /healthz %.0f/s, p50 %.3f ms; publish p50 %.3f ms, async %.0f/s\n",
			r+1, cfg.Count, s.allowedRate, cfg.Clients, s.allowedP50, s.healthRate, s.healthP50, s.publishP50, s.asyncRate)
		samples = append(samples, s)
	}
	pick := func(f func(reviewSample) float64) [3]float64 {
		var xs []float64
		for _, s := range samples {
			xs = append(xs, f(s))
		}
		return [3]float64{median(xs), slices.Min(xs), slices.Max(xs)}
	}
	return &ReviewsReport{
		Sync: cfg.Sync, Clients: cfg.Clients, Repetitions: cfg.Count,
		Allowed: ReviewsFigures{PerSec: pick(func(s reviewSample) float64 { return s.allowedRate }),
			P50Ms: pick(func(s reviewSample) float64 { return s.allowedP50 }), P99Ms: pick(func(s reviewSample) float64 { return s.allowedP99 })},
		Health: ReviewsFigures{PerSec: pick(func(s reviewSample) float64 { return s.healthRate }),
			P50Ms: pick(func(s reviewSample) float64 { return s.healthP50 }), P99Ms: pick(func(s reviewSample) float64 { return s.healthP99 })},
		SyncPublishP50Ms:   pick(func(s reviewSample) float64 { return s.publishP50 }),
		AsyncPublishPerSec: pick(func(s reviewSample) float64 { return s.asyncRate }),
	}, nil
}

func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// measureReviews is one repetition on a fresh store: the API with a gate
// on reviewsPolicy, behind a loopback HTTP server.
func measureReviews(ctx context.Context, cfg ReviewsConfig) (reviewSample, error) {
	var s reviewSample
	st, err := startStack(ctx, cfg.Sync, cfg.Dir, 0)
	if err != nil {
		return s, err
	}
	defer st.close()
	hs, token, closeGate, err := reviewsServer(ctx, st)
	if err != nil {
		return s, err
	}
	defer closeGate()
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients}}
	allowed := func(ctx context.Context, c, i int) error {
		body := `{"run":{"id":"run-` + strconv.Itoa(c) + `","agent":"agent-` + strconv.Itoa(c%8) + `"},"tool_calls":[{"id":"call-` +
			strconv.Itoa(i) + `","name":"crm.read_contact","arguments":{"contact":"c-` + strconv.Itoa(i) + `"}}]}`
		return request(ctx, client, "POST", hs.URL+"/v1/reviews", token, body, []byte(`"verdict":"allowed"`))
	}
	health := func(ctx context.Context, _, _ int) error {
		return request(ctx, client, "GET", hs.URL+"/healthz", "", "", nil)
	}
	if _, _, err := timeClients(ctx, cfg.Clients, cfg.Duration/4, allowed); err != nil { // warm-up
		return s, err
	}
	// Throughput with every client, then one client's latencies; the
	// baseline the same way on the same server.
	var one Dist
	if s.allowedRate, _, err = timeClients(ctx, cfg.Clients, cfg.Duration, allowed); err != nil {
		return s, err
	}
	if _, one, err = timeClients(ctx, 1, cfg.Duration, allowed); err != nil {
		return s, err
	}
	s.allowedP50, s.allowedP99 = one.P50, one.P99
	if s.healthRate, _, err = timeClients(ctx, cfg.Clients, cfg.Duration, health); err != nil {
		return s, err
	}
	if _, one, err = timeClients(ctx, 1, cfg.Duration, health); err != nil {
		return s, err
	}
	s.healthP50, s.healthP99 = one.P50, one.P99
	s.publishP50, s.asyncRate, err = rawPublish(ctx, st, cfg.Duration)
	return s, err
}

// reviewsServer starts the API on st with a gate on reviewsPolicy and an
// agent's token; closeGate closes the gate.
func reviewsServer(ctx context.Context, st *stack) (hs *httptest.Server, token string, closeGate func(), err error) {
	pol, err := policy.Parse([]byte(reviewsPolicy))
	if err != nil {
		return nil, "", nil, err
	}
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: st.agentJS, Policy: orchestrator.StaticPolicy{P: pol}})
	if err != nil {
		return nil, "", nil, err
	}
	closeGate = func() { _ = gate.Close() }
	defer func() {
		if err != nil {
			closeGate()
		}
	}()
	_, apiJS, err := st.connect(roleAPI)
	if err != nil {
		return nil, "", nil, err
	}
	tok, hash, err := api.NewToken()
	if err != nil {
		return nil, "", nil, err
	}
	reg := prometheus.NewRegistry()
	srv, err := api.New(ctx, api.Config{JS: apiJS, Gate: gate, Registerer: reg, Gatherer: reg,
		Tokens:  []api.Token{{Name: "agent", Subject: "agent", SHA256: hash, Roles: []string{api.RoleAgent}}},
		Budgets: api.Budgets{ReviewRate: -1, PendingPerAgent: -1, PendingPerTenant: -1},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, "", nil, err
	}
	return httptest.NewServer(srv.Handler()), tok, closeGate, nil
}

// request sends one request and checks its answer is 200 and contains
// want.
func request(ctx context.Context, client *http.Client, method, url, token, body string, want []byte) error {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || (want != nil && !bytes.Contains(got, want)) {
		return fmt.Errorf("%s %s: status %d: %s", method, url, res.StatusCode, got)
	}
	return nil
}

// timeClients runs op from clients goroutines, each one request at a time,
// for d, and returns the rate and the latencies.
func timeClients(ctx context.Context, clients int, d time.Duration, op func(ctx context.Context, client, i int) error) (float64, Dist, error) {
	var mu sync.Mutex
	var all []time.Duration
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; time.Since(start) < d; i++ {
				t := time.Now()
				if err := op(ctx, c, i); err != nil {
					mu.Lock()
					first = cmp0(first, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(len(all)) / time.Since(start).Seconds(), summarize(all), first
}

// rawPublish is the baseline of persisted writes on st, to a stream of its
// own: one publisher's p50 waiting for each ack, and the rate of
// asynchronous publishes with a window of asyncWindow (what a call's
// history fact, published without waiting, is bounded by).
func rawPublish(ctx context.Context, st *stack, d time.Duration) (syncP50, asyncRate float64, err error) {
	nc, js, err := st.connect(roleRaw)
	if err != nil {
		return 0, 0, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: rawStream, Subjects: []string{rawSubject + ".>"}, Storage: jetstream.FileStorage, Replicas: st.replicas,
	}); err != nil {
		return 0, 0, fmt.Errorf("create %s: %w", rawStream, err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), rawStream) }()
	payload := bytes.Repeat([]byte("a"), rawPayloadBytes)
	_, dist, err := timeClients(ctx, 1, d, func(ctx context.Context, _, _ int) error {
		_, err := js.Publish(ctx, rawSubject+".sync", payload)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	ajs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return 0, 0, err
	}
	n, start := 0, time.Now()
	for ; time.Since(start) < d; n++ {
		if _, err := ajs.PublishAsync(rawSubject+".async", payload, jetstream.WithStallWait(30*time.Second)); err != nil {
			return 0, 0, fmt.Errorf("async publish: %w", err)
		}
	}
	select {
	case <-ajs.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return dist.P50, float64(n) / time.Since(start).Seconds(), nil
}

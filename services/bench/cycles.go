package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// cycleTimeout bounds one review or claim; a cycle that takes longer counts
// as an error.
const cycleTimeout = 30 * time.Second

// CycleReport is the full-cycle throughput: request → record → vote →
// decided → waiter wakes the agent → claim confirmed.
type CycleReport struct {
	Agents int `json:"agents"`
	// Completed is the number of claims confirmed within the window.
	Completed  int     `json:"completed"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	PerSec     float64 `json:"per_sec"`
	// FloorRatio is PerSec divided by the raw floor (target ≥ 0.5).
	FloorRatio float64 `json:"floor_ratio"`
	// SyncPublishRatio is PerSec divided by the raw sync publish rate of
	// the same server.
	SyncPublishRatio float64 `json:"sync_publish_ratio"`
	// Latency of one whole cycle as an agent sees it under this load.
	Latency Dist `json:"cycle_latency"`
	// VoteErrors counts the bot's votes that could not be published.
	VoteErrors int64 `json:"vote_errors"`
	// WarmUpMs is how long the untimed first cycle of every agent took
	// (consumers, leaders and caches settle there, not in the window).
	WarmUpMs float64 `json:"warm_up_ms"`
}

func newRun(prefix string, i int) contracts.Run {
	return contracts.Run{ID: prefix + "-" + strconv.Itoa(i), Agent: benchAgent, RequestedBy: benchAgentBy}
}

var benchCalls = []orchestrator.ToolCall{{ID: benchCallID, Name: benchTool, Arguments: benchArguments}}

// errorLog keeps a count and the first error.
type errorLog struct {
	mu    sync.Mutex
	n     int
	first error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if l.first == nil {
		l.first = err
	}
}

func (l *errorLog) firstText() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		return ""
	}
	return l.first.Error()
}

func measureCycles(ctx context.Context, st *stack, d time.Duration, agents int, raw RawReport) (*CycleReport, error) {
	b, err := startBot(ctx, st, true)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	voteErrs0 := st.voteErrs.Load()
	prefix := "cyc-" + uuid.NewString()[:8]
	warmUp, err := warmUpCycles(ctx, st, b, prefix+"-warm", agents)
	if err != nil {
		return nil, err
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		samples []time.Duration
		errs    errorLog
	)
	start := time.Now()
	deadline := start.Add(d)
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
				t := time.Now()
				if err := cycle(ctx, st.gate, b, newRun(prefix+"-"+strconv.Itoa(a), i)); err != nil {
					if ctx.Err() == nil {
						errs.add(err)
					}
					continue
				}
				if end := time.Now(); end.Before(deadline) {
					mine = append(mine, end.Sub(t))
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	rep := &CycleReport{
		Agents: agents, Completed: len(samples), Errors: errs.n, FirstError: errs.firstText(),
		Seconds: d.Seconds(), VoteErrors: st.voteErrs.Load() - voteErrs0,
		WarmUpMs: ms(warmUp),
	}
	rep.PerSec = float64(rep.Completed) / d.Seconds()
	rep.FloorRatio = ratio(rep.PerSec, raw.FloorCyclesPerSec)
	rep.SyncPublishRatio = ratio(rep.PerSec, raw.SyncPublishPerSec)
	rep.Latency = summarize(samples)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if err := st.arbiterFailed(); err != nil {
		return rep, err
	}
	if rep.Completed == 0 {
		return rep, fmt.Errorf("no cycle completed (%d errors; first: %s)", rep.Errors, rep.FirstError)
	}
	return rep, nil
}

// warmUpCycles runs one untimed cycle per agent, all at once, so the window
// measures the steady state: the first cycles pay for consumer and stream
// leaders settling (seconds on a loaded three-node cluster), which is not
// the throughput an operator sees. Any failure here is the run's error.
func warmUpCycles(ctx context.Context, st *stack, b *bot, prefix string, agents int) (time.Duration, error) {
	start := time.Now()
	errc := make(chan error, agents)
	for a := range agents {
		go func() { errc <- cycle(ctx, st.gate, b, newRun(prefix, a)) }()
	}
	var first error
	for range agents {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return 0, fmt.Errorf("warm-up cycle: %w", first)
	}
	return time.Since(start), nil
}

// cycle reviews one gated call, waits for its approval and claims it.
func cycle(ctx context.Context, gate *orchestrator.Gate, b *bot, run contracts.Run) error {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	eventID := orchestrator.EventID(run, benchCallID)
	r := review(ctx, gate, run, func() { b.parked(eventID) })
	if r.err != nil {
		return r.err
	}
	v := r.v
	if v[0].Verdict != orchestrator.VerdictAllowed {
		return fmt.Errorf("verdict %s: %s", v[0].Verdict, v[0].Reason)
	}
	return v[0].Permit.Claim(ctx)
}

// Bounds on the sequential latency samples.
const (
	minLatencySamples = 20
	maxLatencySamples = 5000
)

// LatencyReport is decision → resumed latency, one approval at a time: from
// right before the vote is published until Review returns the verdict.
type LatencyReport struct {
	Latency Dist `json:"latency"`
	// KVPutWatchP50 is the raw KV put→watch p50 of the same server, the
	// floor of this path (a decision is a KV write seen by a watch).
	KVPutWatchP50     float64 `json:"kv_put_watch_p50_ms"`
	RatioToKVPutWatch float64 `json:"ratio_to_kv_put_watch_p50"`
	Errors            int     `json:"errors"`
	FirstError        string  `json:"first_error,omitempty"`
}

type reviewed struct {
	at  time.Time // when the verdicts reached the waiting goroutine
	v   []orchestrator.Verdict
	err error
}

// review is Gate.Review (ReviewAsync and a wait for its callback) with a hook
// that runs once the review is parked: ReviewAsync has returned, so the
// request is published and the wait registered and checked.
func review(ctx context.Context, gate *orchestrator.Gate, run contracts.Run, parked func()) reviewed {
	ch := make(chan reviewed, 1)
	if err := gate.ReviewAsync(ctx, run, benchCalls, func(v []orchestrator.Verdict, err error) {
		ch <- reviewed{v: v, err: err}
	}); err != nil {
		return reviewed{at: time.Now(), err: err}
	}
	parked()
	r := <-ch
	r.at = time.Now()
	return r
}

func measureLatency(ctx context.Context, st *stack, d time.Duration, kvP50 float64) (*LatencyReport, error) {
	b, err := startBot(ctx, st, false)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	prefix := "lat-" + uuid.NewString()[:8]
	var (
		samples []time.Duration
		errs    errorLog
	)
	start := time.Now()
	giveUp := start.Add(10*d + 30*time.Second)
	for i := 0; len(samples) < maxLatencySamples; i++ {
		if now := time.Now(); (now.Sub(start) >= d && len(samples) >= minLatencySamples) || now.After(giveUp) {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lat, err := oneDecision(ctx, st, b, newRun(prefix, i))
		if err != nil {
			errs.add(err)
			if errs.n > 100 && len(samples) == 0 {
				break
			}
			continue
		}
		samples = append(samples, lat)
	}
	rep := &LatencyReport{Latency: summarize(samples), KVPutWatchP50: kvP50, Errors: errs.n, FirstError: errs.firstText()}
	rep.RatioToKVPutWatch = ratio(rep.Latency.P50, kvP50)
	if len(samples) == 0 {
		return rep, fmt.Errorf("no approval resumed (%d errors; first: %s)", rep.Errors, rep.FirstError)
	}
	return rep, nil
}

// oneDecision reviews one call, waits until the review is parked and its
// record pending, then approves it and times the vote until the review
// returns.
func oneDecision(ctx context.Context, st *stack, b *bot, run contracts.Run) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	eventID := orchestrator.EventID(run, benchCallID)
	pending := b.expectPending(eventID)
	parked := make(chan struct{})
	done := make(chan reviewed, 1)
	go func() { done <- review(ctx, st.gate, run, func() { close(parked) }) }()
	select {
	case <-parked:
	case r := <-done:
		if r.err != nil {
			return 0, r.err
		}
		return 0, fmt.Errorf("review returned before the vote: %s", r.v[0].Verdict)
	}
	select {
	case <-pending:
	case r := <-done:
		if r.err != nil {
			return 0, r.err
		}
		return 0, fmt.Errorf("review returned before the vote: %s", r.v[0].Verdict)
	case <-ctx.Done():
		return 0, errors.New("the record never became pending")
	}
	t0 := time.Now()
	if err := st.vote(ctx, eventID); err != nil {
		return 0, fmt.Errorf("vote: %w", err)
	}
	r := <-done
	if r.err != nil {
		return 0, r.err
	}
	if r.v[0].Verdict != orchestrator.VerdictAllowed {
		return 0, fmt.Errorf("verdict %s: %s", r.v[0].Verdict, r.v[0].Reason)
	}
	return r.at.Sub(t0), nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// figures are one system's measurements in one repetition.
type figures struct {
	Resume latency // signal or vote sent → agent resumed, one at a time
	// Result is, for Temporal only, signal sent → the workflow's result
	// reaches the client that started it.
	Result latency
	// Cycle is, for Temporal only, the latency of a full cycle in the
	// burst, as an agent sees it.
	Cycle    latency
	PerSec   float64 // full cycles per second with concurrent agents
	Cycles   int     // full cycles completed in the window
	Seconds  float64 // the window
	WarmUpMs float64 // untimed first cycle of every agent, all at once
}

// humanPause is how long the human of the latency run waits, once the
// workflow is parked and its first task recorded, before approving. A
// signal sent within ~10 ms of the task's completion took Temporal ~40 ms
// to deliver here, one sent 100 ms later ~5 ms; a person is never that
// quick, so the pause gives Temporal its idle-state figure. (Countersign's
// bench votes as soon as the record is pending, with no pause.)
const humanPause = 100 * time.Millisecond

// resumeOnce runs one sequential cycle: start, wait until the workflow is
// parked and its first task recorded, pause as a human would, approve, and
// time the signal until the workflow code resumes and until its result
// reaches the client.
func (a *temporalAgents) resumeOnce(ctx context.Context, id string) (resumed, result time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	parked := make(chan struct{})
	run, resumedAt, err := a.start(ctx, id, func() { close(parked) })
	if err != nil {
		return 0, 0, err
	}
	defer a.hooks.forget(id)
	select {
	case <-parked:
	case <-ctx.Done():
		return 0, 0, errors.New("the workflow never parked on its signal")
	}
	if err := a.settled(ctx, id); err != nil {
		return 0, 0, err
	}
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(humanPause):
	}
	t0 := time.Now()
	if err := a.approve(ctx, id); err != nil {
		return 0, 0, err
	}
	var t1 time.Time
	select {
	case t1 = <-resumedAt:
	case <-ctx.Done():
		return 0, 0, errors.New("the workflow never resumed")
	}
	if err := run.Get(ctx, nil); err != nil {
		return 0, 0, fmt.Errorf("workflow result: %w", err)
	}
	return t1.Sub(t0), time.Since(t0), nil
}

// measureTemporalResume runs n sequential cycles after one untimed one and
// returns the resume and result latencies.
func measureTemporalResume(ctx context.Context, a *temporalAgents, prefix string, n int) (resume, result latency, err error) {
	if _, _, err := a.resumeOnce(ctx, prefix+"-warm"); err != nil {
		return latency{}, latency{}, fmt.Errorf("warm-up cycle: %w", err)
	}
	resumes := make([]time.Duration, 0, n)
	results := make([]time.Duration, 0, n)
	for i := range n {
		d, r, err := a.resumeOnce(ctx, workflowID(prefix, i))
		if err != nil {
			return latency{}, latency{}, fmt.Errorf("cycle %d: %w", i, err)
		}
		resumes = append(resumes, d)
		results = append(results, r)
	}
	return summarize(resumes), summarize(results), nil
}

// cycle is one full cycle as an agent sees it: start the workflow, the
// human approves once it is parked, the workflow resumes and completes.
func (a *temporalAgents) cycle(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	signalled := make(chan error, 1)
	run, _, err := a.start(ctx, id, func() {
		go func() { signalled <- a.approve(ctx, id) }()
	})
	if err != nil {
		return err
	}
	defer a.hooks.forget(id)
	if err := run.Get(ctx, nil); err != nil {
		return fmt.Errorf("workflow result: %w", err)
	}
	return <-signalled
}

// window counts the cycles that complete between its opening and closing,
// and their latencies.
type window struct {
	mu         sync.Mutex
	start, end time.Time // zero until it opens
	samples    []time.Duration
}

func (w *window) open(d time.Duration) {
	w.mu.Lock()
	w.start = time.Now()
	w.end = w.start.Add(d)
	w.mu.Unlock()
}

func (w *window) record(started, ended time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.start.IsZero() && !ended.Before(w.start) && !ended.After(w.end) {
		w.samples = append(w.samples, ended.Sub(started))
	}
}

// measureTemporalBurst runs agents concurrent loops of full cycles. Once
// every agent has completed its first cycle, it opens a window of d and
// counts the cycles that complete inside it: the steady state, with every
// agent already busy when the window opens. Any failed cycle fails the
// measurement.
func measureTemporalBurst(ctx context.Context, a *temporalAgents, prefix string, d time.Duration, agents int) (figures, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		w      window
		warmed sync.WaitGroup
	)
	warmed.Add(agents)
	stop := make(chan struct{})
	began := time.Now()
	var warmUp time.Duration
	go func() {
		warmed.Wait()
		warmUp = time.Since(began)
		w.open(d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		close(stop)
	}()
	err := parallel(agents, func(ag int) error {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return nil
			default:
			}
			t := time.Now()
			if err := a.cycle(ctx, workflowID(fmt.Sprintf("%s-%d", prefix, ag), i)); err != nil {
				cancel()
				if i == 0 {
					warmed.Done()
				}
				return err
			}
			w.record(t, time.Now())
			if i == 0 {
				warmed.Done()
			}
		}
	})
	if err != nil {
		return figures{}, err
	}
	return figures{
		Cycles: len(w.samples), Seconds: d.Seconds(), PerSec: float64(len(w.samples)) / d.Seconds(),
		WarmUpMs: ms(warmUp), Cycle: summarize(w.samples),
	}, nil
}

// parallel runs f(0) … f(n-1) at once and returns the first error.
func parallel(n int, f func(i int) error) error {
	errc := make(chan error, n)
	for i := range n {
		go func() { errc <- f(i) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator"
)

// pendingWorkers submit requests and register waits in parallel; they exit
// before goroutines are counted.
const pendingWorkers = 64

// PendingReport is the pending-capacity measurement: many runs waiting at
// once in one process, then all decided.
type PendingReport struct {
	Sync  string `json:"sync"`
	Waits int    `json:"waits"`
	// SubmitSeconds: publishing every request until the arbiter had
	// created every record.
	SubmitSeconds float64 `json:"submit_seconds"`
	// RegisterSeconds: registering every wait with Gate.ReviewAsync
	// (re-attaching to the pending records).
	RegisterSeconds float64 `json:"register_seconds"`
	// WaiterBytesPerWait is the heap growth (after GC) from registering
	// the waits, divided by their number: the waiter's entries and the
	// state ReviewAsync keeps per review.
	WaiterBytesPerWait float64 `json:"waiter_bytes_per_wait"`
	// ProcessBytesPerApproval is the whole process's heap growth per
	// pending approval, server included, from before the first request.
	ProcessBytesPerApproval float64 `json:"process_bytes_per_approval"`
	// GoroutineDelta is the change in goroutines from registering the waits.
	GoroutineDelta int `json:"goroutine_delta"`
	// WaiterPending is the number of waits the waiter reported holding.
	WaiterPending int `json:"waiter_pending"`
	// VotesSeconds: publishing every vote (async, acks included).
	VotesSeconds float64 `json:"votes_seconds"`
	// DecideSeconds: first vote published until the last record was
	// stored approved (the KV write's server timestamp).
	DecideSeconds float64 `json:"decide_seconds"`
	// WakeAfterLastDecisionSeconds: last record stored approved until the
	// last waiting run's callback fired (target < 5 s).
	WakeAfterLastDecisionSeconds float64 `json:"wake_after_last_decision_seconds"`
	// TotalSeconds: first vote published until the last callback fired.
	TotalSeconds float64 `json:"total_seconds"`
	Woken        int     `json:"woken"`
	Allowed      int     `json:"allowed"`
	FirstError   string  `json:"first_error,omitempty"`
	// Timers is the wake-up lag of expiry timers measured while every
	// pending approval's timer is held.
	Timers *TimerReport `json:"timers,omitempty"`
	// Failed holds the error that stopped the measurement, if one did;
	// the other figures are then incomplete.
	Failed string `json:"failed,omitempty"`
}

// heapAfterGC is the live heap after full collections.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// parallel calls f(i) for i in [0, n) on pendingWorkers goroutines and
// returns the first error.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range pendingWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// waitFor polls cond every 20 ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	limit := time.After(timeout)
	for !cond() {
		select {
		case <-t.C:
		case <-limit:
			return fmt.Errorf("%s: not done after %s", what, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// atomicMax raises v to x.
func atomicMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// measurePending submits n requests, registers a wait on each, measures
// expiry timers while all are pending, then approves every one and times
// how fast the waiting runs wake.
func measurePending(ctx context.Context, st *stack, n int, pr *printer) (*PendingReport, error) {
	m := newPendingRun(st, n, pr)
	rep := m.rep

	// Every call gets the same far deadline: without one, JetStream calls
	// time out after 5 s, which a starved shared machine can exceed.
	sctx, cancelSubmit := context.WithTimeout(ctx, m.slow)
	defer cancelSubmit()
	if err := m.submit(ctx, sctx); err != nil {
		return rep, err
	}
	if err := m.warmRecords(ctx, sctx); err != nil {
		return rep, err
	}

	// The waits' context also bounds their reads; it ends long after
	// every wait should have been woken.
	wctx, cancelWaits := context.WithTimeout(ctx, 3*m.slow)
	defer cancelWaits()
	waits, err := m.registerWaits(ctx, wctx)
	if err != nil {
		return rep, err
	}

	// With every approval pending, each holding its expiry schedule,
	// measure how late short deadlines are applied.
	tr, err := measureTimers(ctx, st, n)
	rep.Timers = tr
	if err != nil {
		return rep, fmt.Errorf("timers: %w", err)
	}
	pr.timers(tr)

	obs, err := m.observeDecisions(ctx)
	if err != nil {
		return rep, err
	}
	defer obs.stop()
	votesStart, err := m.publishVotes(ctx)
	if err != nil {
		return rep, err
	}
	return rep, m.awaitWakes(ctx, waits, obs, votesStart)
}

// pendingRun is one pending-capacity measurement in progress.
type pendingRun struct {
	st     *stack
	n      int
	pr     *printer
	rep    *PendingReport
	prefix string
	ids    []string      // the requests' event ids
	slow   time.Duration // the bound of each phase
	heap0  uint64        // the heap before the first request
	base   time.Time     // when registering began; times are kept relative to it
}

func newPendingRun(st *stack, n int, pr *printer) *pendingRun {
	m := &pendingRun{
		st: st, n: n, pr: pr,
		rep:    &PendingReport{Sync: st.mode, Waits: n},
		prefix: "pend-" + uuid.NewString()[:8],
		ids:    make([]string, n),
		// Generous bounds: with fsync on a slow disk 100,000 requests take minutes.
		slow: 5*time.Minute + time.Duration(n)*5*time.Millisecond,
	}
	for i := range m.ids {
		m.ids[i] = orchestrator.EventID(newRun(m.prefix, i), benchCallID)
	}
	m.heap0 = heapAfterGC()
	return m
}

// submit publishes every request and waits until the arbiter created every
// record, before any wait exists, so the waits' memory is measured apart
// from the records'.
func (m *pendingRun) submit(ctx, sctx context.Context) error {
	st := m.st
	created0 := st.metric("countersign_requests_created_total")
	start := time.Now()
	if err := parallel(sctx, m.n, func(i int) error {
		_, err := st.gate.Submit(sctx, newRun(m.prefix, i), benchCalls)
		return err
	}); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := waitFor(ctx, m.slow, "records created", func() bool {
		return st.metric("countersign_requests_created_total")-created0 >= float64(m.n) || st.arbiterFailed() != nil
	}); err != nil {
		return err
	}
	if err := st.arbiterFailed(); err != nil {
		return err
	}
	m.rep.SubmitSeconds = time.Since(start).Seconds()
	m.pr.pendingStep(fmt.Sprintf("%d requests submitted and records created in %.1f s", m.n, m.rep.SubmitSeconds))
	return nil
}

// warmRecords reads every record once the way registering will, so the
// server's block caches are as warm before as after.
func (m *pendingRun) warmRecords(ctx, sctx context.Context) error {
	akv, err := m.st.agentJS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return err
	}
	if err := parallel(sctx, m.n, func(i int) error {
		_, err := akv.Get(sctx, m.ids[i])
		return err
	}); err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	return nil
}

// pendingWaits counts the verdicts of the registered waits.
type pendingWaits struct {
	n              int
	base           time.Time
	woken, allowed atomic.Int64
	lastWake       atomic.Int64 // since base
	errs           errorLog
	allWoken       chan struct{}
}

func (w *pendingWaits) onVerdict(v []orchestrator.Verdict, err error) {
	switch {
	case err != nil:
		w.errs.add(err)
	case v[0].Verdict == orchestrator.VerdictAllowed:
		w.allowed.Add(1)
	default:
		w.errs.add(fmt.Errorf("verdict %s: %s", v[0].Verdict, v[0].Reason))
	}
	atomicMax(&w.lastWake, int64(time.Since(w.base)))
	if w.woken.Add(1) == int64(w.n) {
		close(w.allWoken)
	}
}

// registerWaits registers every wait with Gate.ReviewAsync under wctx and
// records the time, memory and goroutines it took.
func (m *pendingRun) registerWaits(ctx, wctx context.Context) (*pendingWaits, error) {
	st, rep := m.st, m.rep
	m.base = time.Now()
	w := &pendingWaits{n: m.n, base: m.base, allWoken: make(chan struct{})}
	heap1 := heapAfterGC()
	g1 := runtime.NumGoroutine()
	start := time.Now()
	if err := parallel(ctx, m.n, func(i int) error {
		return st.gate.ReviewAsync(wctx, newRun(m.prefix, i), benchCalls, w.onVerdict)
	}); err != nil {
		return nil, fmt.Errorf("register waits: %w", err)
	}
	rep.RegisterSeconds = time.Since(start).Seconds()
	// Each review records its call in the history without waiting for the
	// acknowledgement (history.Record): the heap is read once those are
	// in, so it holds what the waits hold, not publishes in flight.
	select {
	case <-st.agentJS.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	heap2 := heapAfterGC()
	rep.GoroutineDelta = runtime.NumGoroutine() - g1
	rep.WaiterPending = st.gate.Waiter().Pending()
	rep.WaiterBytesPerWait = (float64(heap2) - float64(heap1)) / float64(m.n)
	rep.ProcessBytesPerApproval = (float64(heap2) - float64(m.heap0)) / float64(m.n)
	m.pr.pendingStep(fmt.Sprintf("%d waits registered in %.1f s; waiter holds %d", m.n, rep.RegisterSeconds, rep.WaiterPending))
	return w, nil
}

// decisionObserver watches records turn terminal from its own connection.
type decisionObserver struct {
	decided     atomic.Int64
	lastDecided atomic.Int64 // server timestamp, since base
	w           jetstream.KeyWatcher
	done        chan struct{}
}

func (o *decisionObserver) stop() {
	_ = o.w.Stop()
	<-o.done
}

// observeDecisions starts watching the approvals bucket for decisions.
func (m *pendingRun) observeDecisions(ctx context.Context) (*decisionObserver, error) {
	_, ojs, err := m.st.connect(roleObserver)
	if err != nil {
		return nil, err
	}
	okv, err := ojs.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		return nil, err
	}
	ow, err := okv.WatchAll(context.WithoutCancel(ctx), jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return nil, err
	}
	o := &decisionObserver{w: ow, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for e := range ow.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			// Nothing else writes while the waits are pending: each update
			// is one record turning terminal.
			atomicMax(&o.lastDecided, int64(e.Created().Sub(m.base)))
			o.decided.Add(1)
		}
	}()
	return o, nil
}

// publishVotes approves every request, asynchronously, and waits for the
// acks; it returns when publishing began.
func (m *pendingRun) publishVotes(ctx context.Context) (time.Time, error) {
	st := m.st
	voteErrs0 := st.voteErrs.Load()
	votesStart := time.Now()
	for _, id := range m.ids {
		msg, vid := voteMsg(id)
		if _, err := st.voterJS.PublishMsgAsync(msg, jetstream.WithMsgID(vid), jetstream.WithStallWait(time.Minute)); err != nil {
			return votesStart, fmt.Errorf("publish vote: %w", err)
		}
	}
	select {
	case <-st.voterJS.PublishAsyncComplete():
	case <-time.After(m.slow):
		return votesStart, errors.New("vote acks missing")
	case <-ctx.Done():
		return votesStart, ctx.Err()
	}
	if n := st.voteErrs.Load() - voteErrs0; n > 0 {
		return votesStart, fmt.Errorf("%d votes could not be published", n)
	}
	m.rep.VotesSeconds = time.Since(votesStart).Seconds()
	m.pr.pendingStep(fmt.Sprintf("%d votes published in %.1f s", m.n, m.rep.VotesSeconds))
	return votesStart, nil
}

// awaitWakes waits for every waiting run to wake and every decision to be
// observed, and reports how long deciding and waking took.
func (m *pendingRun) awaitWakes(ctx context.Context, w *pendingWaits, obs *decisionObserver, votesStart time.Time) error {
	n, rep := m.n, m.rep
	select {
	case <-w.allWoken:
	case <-time.After(m.slow):
	case <-ctx.Done():
		return ctx.Err()
	}
	// The observer may trail the waiter slightly.
	_ = waitFor(ctx, 10*time.Second, "decisions observed", func() bool { return obs.decided.Load() >= int64(n) })
	rep.Woken = int(w.woken.Load())
	rep.Allowed = int(w.allowed.Load())
	rep.FirstError = w.errs.firstText()
	at := func(v *atomic.Int64) time.Time { return m.base.Add(time.Duration(v.Load())) }
	rep.DecideSeconds = at(&obs.lastDecided).Sub(votesStart).Seconds()
	rep.WakeAfterLastDecisionSeconds = at(&w.lastWake).Sub(at(&obs.lastDecided)).Seconds()
	rep.TotalSeconds = at(&w.lastWake).Sub(votesStart).Seconds()
	if rep.Woken < n {
		return fmt.Errorf("%d of %d waiting runs woken (first error: %s)", rep.Woken, n, rep.FirstError)
	}
	if d := obs.decided.Load(); d < int64(n) {
		return fmt.Errorf("%d of %d decisions observed", d, n)
	}
	return nil
}

package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
)

// worker joins pool as a separate process would (its own orchestrator-role
// connection) and runs it until the test ends or stop is called.
func (e *env) worker(t *testing.T, pool string, handle func(context.Context, contracts.Decided) error, tune func(*orchestrator.DecisionPoolConfig)) (stop func()) {
	t.Helper()
	cfg := orchestrator.DecisionPoolConfig{JS: e.srv.JetStreamAs(embedded.RoleOrchestrator), Pool: pool, Handle: handle, MinBackoff: 10 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	p, err := orchestrator.NewDecisionPool(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// decide makes n approvals of run and approves each.
func (e *env) decideMany(t *testing.T, runID string, n int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	r := run
	r.ID = runID
	for i := range n {
		c := orchestrator.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "payments.send", Arguments: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, i+1))}
		v, err := e.gate.Submit(context.Background(), r, []orchestrator.ToolCall{c})
		if err != nil {
			t.Fatal(err)
		}
		ids[v[0].EventID] = true
		e.waitRecord(t, v[0].EventID, pending)
		e.vote(t, v[0].EventID, "dave", contracts.DecisionApprove, "")
	}
	return ids
}

// Each decision goes to exactly one worker of a pool, carrying its run
// and outcome; a pool of other name gets every decision too.
func TestDecisionPoolHandsEachDecisionToOneWorker(t *testing.T) {
	e := setup(t)
	type got struct {
		worker string
		d      contracts.Decided
	}
	seen := make(chan got, 100)
	handler := func(name string) func(context.Context, contracts.Decided) error {
		return func(_ context.Context, d contracts.Decided) error { seen <- got{name, d}; return nil }
	}
	e.worker(t, "billing", handler("a"), nil)
	e.worker(t, "billing", handler("b"), nil)
	e.worker(t, "audit", handler("audit"), nil)

	const n = 12
	ids := e.decideMany(t, "pool-run", n)
	billing, audit := map[string]int{}, map[string]int{}
	deadline := time.After(30 * time.Second)
	for len(billing) < n || len(audit) < n {
		select {
		case g := <-seen:
			if !ids[g.d.EventID] || g.d.Status != contracts.StatusApproved || g.d.RunID != "pool-run" || g.d.Agent != run.Agent {
				t.Fatalf("worker %s got %+v", g.worker, g.d)
			}
			if g.worker == "audit" {
				audit[g.d.EventID]++
			} else {
				billing[g.d.EventID]++
			}
		case <-deadline:
			t.Fatalf("after 30 s the billing pool had %d and the audit pool %d of %d decisions", len(billing), len(audit), n)
		}
	}
	for id, c := range billing {
		if c != 1 {
			t.Errorf("decision %s reached the billing pool %d times", id, c)
		}
	}
}

// A decision whose handler fails, or whose worker dies holding it, goes to
// the pool again until a handler returns nil: none is lost.
func TestDecisionPoolRetriesFailuresAndDeadWorkers(t *testing.T) {
	e := setup(t)
	holding := make(chan string, 1)
	release := make(chan struct{})
	var deadConn interface{ Close() }
	e.worker(t, "resume", func(ctx context.Context, d contracts.Decided) error {
		select {
		case holding <- d.EventID:
		default:
		}
		<-release // never finishes while the test runs: the worker dies holding it
		return errors.New("released")
	}, func(c *orchestrator.DecisionPoolConfig) { c.AckWait = time.Second; deadConn = c.JS.Conn() })
	t.Cleanup(func() { close(release) }) // runs before the worker's stop
	ids := e.decideMany(t, "dies", 1)
	var id string
	select {
	case id = <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the first worker got no decision")
	}
	if !ids[id] {
		t.Fatalf("the first worker got %s", id)
	}

	// A second worker whose first try fails.
	var mu sync.Mutex
	tries := 0
	handled := make(chan string, 1)
	e.worker(t, "resume", func(_ context.Context, d contracts.Decided) error {
		mu.Lock()
		defer mu.Unlock()
		tries++
		if tries == 1 {
			return errors.New("the run's state is not readable yet")
		}
		handled <- d.EventID
		return nil
	}, func(c *orchestrator.DecisionPoolConfig) { c.AckWait = time.Second })
	deadConn.Close() // the first worker's process is gone; its decision was never acknowledged
	select {
	case got := <-handled:
		if got != id {
			t.Fatalf("the second worker handled %s, want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the decision held by a dead worker never reached the pool again")
	}
	mu.Lock()
	defer mu.Unlock()
	if tries != 2 {
		t.Errorf("the second worker's handler ran %d times, want 2 (a failure, then success)", tries)
	}
}

func TestDecisionPoolConfigIsChecked(t *testing.T) {
	for _, cfg := range []orchestrator.DecisionPoolConfig{{}, {Pool: "Bad Name"}, {Pool: "ok"}} {
		if _, err := orchestrator.NewDecisionPool(context.Background(), cfg); err == nil {
			t.Errorf("NewDecisionPool(%+v) accepted", cfg)
		}
	}
}

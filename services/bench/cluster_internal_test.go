package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/events"
)

// The 3-node cluster of `countersign bench -sync cluster` comes up every
// time: each start waits for a meta leader that sees every node's
// JetStream, provisions while the cluster forms, and returns once every
// stream and bucket has a leader and current replicas, so the arbiter and
// the gate open them at once. A start that does not come up fails the
// test with what it waited for.
func TestClusterComesUpEveryTime(t *testing.T) {
	const starts = 5
	for i := range starts {
		// A bound for a loaded machine, not a measurement.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		st, err := startStack(ctx, SyncCluster, t.TempDir(), 0)
		if err != nil {
			cancel()
			t.Fatalf("start %d of %d: %v", i+1, starts, err)
		}
		if err := st.arbiterFailed(); err != nil {
			t.Errorf("start %d: %v", i+1, err)
		}
		if _, err := st.kv.Status(ctx); err != nil {
			t.Errorf("start %d: the approvals bucket does not answer: %v", i+1, err)
		}
		if i == 0 {
			provisionWritesNothing(ctx, t, st)
		}
		st.close()
		cancel()
	}
}

// The 5-node cluster of `-sync cluster5` comes up the same way, with every
// stream and bucket R3 (not R5) and their replicas spread over the nodes:
// no node holds all of them.
func TestFiveNodeClusterComesUpWithThreeReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	st, err := startStack(ctx, SyncCluster5, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if len(st.servers) != 5 || st.replicas != 3 {
		t.Fatalf("%d servers, %d replicas; want 5 and 3", len(st.servers), st.replicas)
	}
	_, js, err := st.connect(roleProvision)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int{} // streams with a replica on each node
	streams := 0
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: replicas %d, cluster %+v; want R3 with a leader and two followers", name, info.Config.Replicas, info.Cluster)
			continue
		}
		streams++
		held[info.Cluster.Leader]++
		for _, r := range info.Cluster.Replicas {
			held[r.Name]++
		}
	}
	if streams < 5 {
		t.Fatalf("%d streams placed, want the contract's streams and buckets", streams)
	}
	for node, n := range held {
		if n == streams {
			t.Errorf("node %s holds a replica of all %d streams: placement did not spread", node, streams)
		}
	}
	if len(held) < 4 {
		t.Errorf("replicas on %d of 5 nodes, want them spread over at least 4", len(held))
	}
}

// provisionWritesNothing provisions the running cluster again and checks
// that no stream configuration is written: the replicated buckets' streams
// (leader reads, room for the fleet's watchers) read as configured.
func provisionWritesNothing(ctx context.Context, t *testing.T, st *stack) {
	t.Helper()
	nc, js, err := st.connect(roleProvision)
	if err != nil {
		t.Fatal(err)
	}
	writes := make(chan *nats.Msg, 64)
	for _, subj := range []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>"} {
		if _, err := nc.ChanSubscribe(subj, writes); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(ctx, js, events.ProvisionConfig{Replicas: st.replicas}); err != nil {
		t.Fatal(err)
	}
	// The requests went out on nc before this round trip: their copies
	// are in writes once it returns.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(writes); n != 0 {
		m := <-writes
		t.Errorf("provisioning the provisioned cluster wrote %d configurations (first: %s %s), want none", n, m.Subject, m.Data)
	}
}

// A cluster that cannot form (two of its three nodes stopped) does not
// hang a start: provisioning gives up when its context ends, and says what
// it was waiting for.
func TestClusterThatCannotFormSaysWhy(t *testing.T) {
	st := &stack{mode: SyncCluster, dir: t.TempDir()}
	defer st.close()
	if err := st.startServers(); err != nil {
		t.Fatal(err)
	}
	_, js, err := st.connect(roleProvision)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.servers[1:] {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	// The deadline is what is tested: nothing can succeed before it.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err = events.Provision(ctx, js, events.ProvisionConfig{Replicas: 3})
	if err == nil {
		t.Fatal("provisioned R3 streams with one node of three")
	}
	if !strings.Contains(err.Error(), "did not accept every stream and bucket in time") &&
		!strings.Contains(err.Error(), "waited for every stream") {
		t.Errorf("the error does not say what was waited for: %v", err)
	}
}

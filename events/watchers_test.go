package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// Every agent process holds a watch of hitl_policy and one of
// hitl_grants: a fleet of more than a thousand processes (the server's
// default limit of consumers per stream) can start, also after the buckets
// are provisioned again.
func TestFleetsOfMoreThanAThousandProcessesCanWatchPolicyAndGrants(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	// 2,200 watches take as long as the machine makes them: this tests how
	// many can be held, not how fast, so it has time to spare.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Provisioned twice: the second create-or-update must not leave the
	// buckets with the server's default.
	if err := events.Provision(ctx, admin, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	agent := srv.JetStreamAs(embedded.RoleOrchestrator)
	const processes = 1100
	for _, bucket := range []string{contracts.BucketPolicy, contracts.BucketGrants} {
		st, err := admin.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxConsumers; got != events.FleetWatchers {
			t.Errorf("%s allows %d consumers, want %d", bucket, got, events.FleetWatchers)
		}
		kv, err := agent.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		watchers := make([]jetstream.KeyWatcher, 0, processes)
		for i := range processes {
			w, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatalf("%s: watch %d of %d: %v", bucket, i+1, processes, err)
			}
			watchers = append(watchers, w)
		}
		for _, w := range watchers {
			// A watcher whose ordered consumer the client already reset or
			// closed (a slow machine: 1,100 of them at once) has nothing
			// left to stop.
			if err := w.Stop(); err != nil && !errors.Is(err, nats.ErrBadSubscription) {
				t.Fatal(err)
			}
		}
	}
}

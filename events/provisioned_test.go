package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/eventstest"
)

// streamWrites counts the stream create and update requests nc's server
// is sent: every client's request also reaches this subscription, before
// the server answers it.
func streamWrites(t *testing.T, nc *nats.Conn) func() int {
	t.Helper()
	ch := make(chan *nats.Msg, 256)
	for _, subj := range []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>"} {
		sub, err := nc.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		t.Helper()
		// The requests went out on nc before this round trip, so their
		// copies are in ch once it returns.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n := len(ch)
		for range n {
			<-ch
		}
		return n
	}
}

// A start that finds every stream and bucket as it should be writes no
// configuration: an update, even to the same configuration, makes the
// server load each stream's oldest block again. A changed setting is
// still applied, and then left alone.
func TestProvisionLeavesCurrentStreamsAlone(t *testing.T) {
	srv := eventstest.NewServer(t)
	nc := srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	writes := streamWrites(t, nc)
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n == 0 {
		t.Fatal("the first provisioning wrote no stream")
	}
	if err := events.Provision(ctx, js, events.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 0 {
		t.Fatalf("provisioning current streams and buckets wrote %d configurations, want none", n)
	}
	longer := events.ProvisionConfig{Retention: 2 * events.DefaultRetention}
	if err := events.Provision(ctx, js, longer); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n == 0 {
		t.Fatal("a longer retention was not written")
	}
	for _, name := range []string{contracts.StreamEvents, "KV_" + contracts.BucketApprovals} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxAge; got != longer.Retention {
			t.Errorf("%s keeps messages %s, want %s", name, got, longer.Retention)
		}
	}
	if err := events.Provision(ctx, js, longer); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 0 {
		t.Fatalf("provisioning the longer retention again wrote %d configurations, want none", n)
	}
}

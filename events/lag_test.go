package events_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

func TestLagCollectorReportsBacklog(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	// Stored before the consumer exists: the server counts them into its
	// pending figure when it creates the consumer (a message stored later
	// reaches that figure asynchronously).
	for i := 0; i < 3; i++ {
		e.publish(t, "billing", []byte(`{}`), nil)
	}
	if _, err := e.js.CreateOrUpdateConsumer(ctx, contracts.StreamRequests, jetstream.ConsumerConfig{
		Durable: "lagging", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(events.NewLagCollector(
		events.Consumer{JS: e.js, Stream: contracts.StreamRequests, Durable: "lagging"},
		events.Consumer{JS: e.js, Stream: contracts.StreamRequests, Durable: "missing"}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"countersign_consumer_pending consumer=lagging stream=HITL_REQUESTS":     3,
		"countersign_consumer_ack_pending consumer=lagging stream=HITL_REQUESTS": 0,
	}
	if len(got) != len(want) {
		t.Errorf("gauges %v, want %v (a missing consumer is left out)", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

package events

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Consumer names one durable consumer of a stream, and the JetStream
// context (the role's own NATS user) it is read through.
type Consumer struct {
	JS              jetstream.JetStream
	Stream, Durable string
}

// LagCollector exports the backlog of durable consumers as gauges, read
// from the server when scraped: countersign_consumer_pending (messages not
// yet delivered) and countersign_consumer_ack_pending (delivered, not yet
// acknowledged), by stream and consumer. A consumer the server cannot
// describe in time is left out of that scrape.
type LagCollector struct {
	consumers []Consumer
	pending   *prometheus.Desc
	ackPend   *prometheus.Desc
}

// NewLagCollector returns a collector for consumers.
func NewLagCollector(consumers ...Consumer) *LagCollector {
	labels := []string{"stream", "consumer"}
	return &LagCollector{
		consumers: consumers,
		pending: prometheus.NewDesc("countersign_consumer_pending",
			"Messages of the stream the durable consumer has not delivered yet (its lag).", labels, nil),
		ackPend: prometheus.NewDesc("countersign_consumer_ack_pending",
			"Messages the durable consumer delivered and that are not acknowledged yet.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.ackPend
}

// Collect implements prometheus.Collector.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, cr := range c.consumers {
		// Looking the consumer up reads its state: one request each.
		cons, err := cr.JS.Consumer(ctx, cr.Stream, cr.Durable)
		if err != nil {
			continue
		}
		info := cons.CachedInfo()
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(info.NumPending), cr.Stream, cr.Durable)
		ch <- prometheus.MustNewConstMetric(c.ackPend, prometheus.GaugeValue, float64(info.NumAckPending), cr.Stream, cr.Durable)
	}
}

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/countersign/countersign/events/tracing"
)

// startTracing installs the OTLP trace exporter the otel section (or the
// OTEL_EXPORTER_OTLP_* variables) names, and returns what flushes and
// stops it on the way out; nothing is installed without an endpoint.
func startTracing(ctx context.Context, c tracing.Config, log *slog.Logger) (stop func(), err error) {
	headers := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		if headers[k], err = secret("otel.headers."+k, v); err != nil {
			return nil, err
		}
	}
	c.Headers = headers
	shutdown, err := tracing.Setup(ctx, c)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}, nil
}

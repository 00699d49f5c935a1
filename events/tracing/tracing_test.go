package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestEnabledOnlyWithAnEndpoint(t *testing.T) {
	for _, env := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(env, "")
	}
	if (Config{}).Enabled() {
		t.Error("enabled with no endpoint anywhere")
	}
	if !(Config{Endpoint: "http://collector:4318"}).Enabled() {
		t.Error("not enabled with an endpoint in the file")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
	if !(Config{}).Enabled() {
		t.Error("not enabled with OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if (Config{}).Enabled() {
		t.Error("enabled with OTEL_TRACES_EXPORTER=none")
	}
}

func TestEndpointMustBeHTTP(t *testing.T) {
	for _, ep := range []string{"ftp://collector:21", "http://", "://x"} {
		if _, err := (Config{Endpoint: ep}).options(); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	for _, ep := range []string{"http://collector:4318", "https://collector/v1/traces", "collector:4318"} {
		if _, err := (Config{Endpoint: ep, Insecure: true}).options(); err != nil {
			t.Errorf("endpoint %q: %v", ep, err)
		}
	}
}

func TestStartJoinsTheTraceparent(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	rec := tracetest.NewSpanRecorder()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	sc, ok := Parse(parent)
	if !ok {
		t.Fatal("a valid traceparent does not parse")
	}
	_, span := tr.Start(withRemote(context.Background(), parent), "vote")
	tp := Traceparent(span)
	span.End()
	got := rec.Ended()[0]
	if got.Parent().SpanID() != sc.SpanID() || got.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("span parent %s trace %s, want %s", got.Parent().SpanID(), got.SpanContext().TraceID(), parent)
	}
	if tp[:36] != parent[:36] || tp[36:52] != got.SpanContext().SpanID().String() {
		t.Errorf("Traceparent %s does not name the span", tp)
	}
	if _, ok := Parse("00-00000000000000000000000000000000-b7ad6b7169203331-01"); ok {
		t.Error("a zero trace id parses")
	}
}

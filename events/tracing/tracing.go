package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/contracts"
)

// Span names, one for each step of an approval.
const (
	SpanReview   = "review"           // the API answers POST /v1/reviews
	SpanRequest  = "approval.request" // the arbiter creates the record
	SpanNotify   = "notify"           // the notifier delivers on one channel
	SpanVote     = "vote"             // the arbiter counts a vote
	SpanDecision = "decision"         // the record turns terminal
	SpanClaim    = "claim"            // the arbiter applies a claim
	SpanOutcome  = "outcome"          // the arbiter records the call's outcome
)

// Attribute keys. Values are identifiers and verdicts, never arguments.
const (
	AttrEventID  = attribute.Key("countersign.event_id")
	AttrTool     = attribute.Key("countersign.tool")
	AttrRule     = attribute.Key("countersign.rule")
	AttrDecision = attribute.Key("countersign.decision")
	AttrChannel  = attribute.Key("countersign.channel")
	AttrKind     = attribute.Key("countersign.kind")
	AttrStatus   = attribute.Key("countersign.status")
	AttrRefusal  = attribute.Key("countersign.refusal")
	// AttrOutcome is how a claimed call ended, as its claimant reported.
	AttrOutcome = attribute.Key("countersign.outcome")
)

// Config is the otel section of countersign.yaml. Every field may be left
// empty; the OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME variables fill it.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP URL (http://collector:4318,
	// spans sent to its /v1/traces) or a full traces URL (one with a path).
	// Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; with neither, nothing is exported.
	Endpoint string `yaml:"endpoint"`
	// Headers are sent with every export (an API key of a vendor).
	Headers map[string]string `yaml:"headers"`
	// ServiceName is the service.name of the spans (default countersign).
	ServiceName string `yaml:"service_name"`
	// Insecure sends to an endpoint given as host:port over plain HTTP.
	Insecure bool `yaml:"insecure"`
}

// Enabled reports whether c, or the environment, names an endpoint.
func (c Config) Enabled() bool {
	if os.Getenv("OTEL_SDK_DISABLED") == "true" || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return c.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func (c Config) options() ([]otlptracehttp.Option, error) {
	var opts []otlptracehttp.Option
	switch {
	case c.Endpoint == "":
	case strings.Contains(c.Endpoint, "://"):
		u, err := url.Parse(c.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("otel.endpoint: %q is not an http or https URL", c.Endpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	default:
		opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint))
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	if len(c.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
	}
	return opts, nil
}

// Setup installs a tracer provider that batches spans to the configured
// OTLP/HTTP endpoint and W3C trace context propagation. Without an
// endpoint it installs nothing. shutdown flushes what is left and stops
// the exporter; call it once, on the way out.
func Setup(ctx context.Context, c Config) (shutdown func(context.Context) error, err error) {
	if !c.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otel: exporter: %w", err)
	}
	name := c.ServiceName
	if name == "" {
		name = os.Getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = "countersign"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("otel: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

// Active reports whether Setup installed an exporter: without one, callers
// may skip building what only a span would hold.
func Active() bool {
	_, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	return ok
}

// tracer is the product's tracer of the installed provider.
func tracer() trace.Tracer {
	return otel.GetTracerProvider().Tracer("github.com/countersign/countersign")
}

// Start starts span name. Its parent is the traceparent parent when that
// is valid (the remote span a request or record names), otherwise the span
// ctx holds, otherwise none (a new trace).
func Start(ctx context.Context, name, parent string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer().Start(withRemote(ctx, parent), name, trace.WithAttributes(attrs...))
}

// withRemote is ctx with the remote parent tp names, ctx when tp is not valid.
func withRemote(ctx context.Context, tp string) context.Context {
	if sc, ok := Parse(tp); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Parse reads a W3C traceparent as a remote span context.
func Parse(tp string) (trace.SpanContext, bool) {
	if !contracts.ValidTraceparent(tp) {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if tp[53:55] == "01" {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}), true
}

// Traceparent is the W3C traceparent naming span, "" unless span is
// recording (exported): a no-op span names nothing a collector will see.
func Traceparent(span trace.Span) string {
	if !span.IsRecording() {
		return ""
	}
	sc := span.SpanContext()
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Record exports a finished span name that began at start and ends now.
func Record(ctx context.Context, name, parent string, start time.Time, attrs ...attribute.KeyValue) {
	_, span := tracer().Start(withRemote(ctx, parent), name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	span.End()
}

// Approval is the attributes every span of an approval carries.
func Approval(rec *contracts.Record) []attribute.KeyValue {
	return Request(&rec.Request)
}

// Request is the attributes of the approval req asks for.
func Request(req *contracts.ApprovalRequested) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrEventID.String(req.EventID), AttrRule.String(req.Policy.Rule)}
	if req.ToolCall != nil { // a question asks about no call
		attrs = append(attrs, AttrTool.String(req.ToolCall.Name))
	}
	return attrs
}

// Package tracing exports OpenTelemetry spans of an approval's life over
// OTLP/HTTP, in the trace of the agent that asked for it.
//
// Setup installs the exporter when an endpoint is configured (in
// countersign.yaml or the standard OTEL_EXPORTER_OTLP_* variables); without
// one nothing is installed and every span is a no-op. Start opens a span
// whose parent is the W3C traceparent a request or record carries, so
// spans made by different roles, on different messages, join one trace.
//
// Spans carry identifiers and verdicts (event id, tool, rule, decision,
// channel, status), never a call's arguments.
package tracing

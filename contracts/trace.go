package contracts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// HeaderTraceparent is the W3C Trace Context header. It travels on HTTP
// requests into the API, in the headers of every bus message, and on
// outgoing webhooks, so one trace follows a call from review to resume.
const HeaderTraceparent = "traceparent"

// NewTraceparent starts a trace: version 00, a random 16-byte trace id, a
// random 8-byte span id, sampled.
func NewTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// ValidTraceparent reports whether s is a version-00 traceparent with a
// non-zero trace id and span id.
func ValidTraceparent(s string) bool {
	parts := strings.Split(s, "-")
	if len(s) != 55 || len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return false
	}
	for _, p := range parts {
		if strings.Trim(p, "0123456789abcdef") != "" {
			return false
		}
	}
	return strings.Trim(parts[1], "0") != "" && strings.Trim(parts[2], "0") != ""
}

// ChildTraceparent is a new span of parent's trace (same trace id and flags,
// a new span id); a new trace when parent is not valid.
func ChildTraceparent(parent string) string {
	if !ValidTraceparent(parent) {
		return NewTraceparent()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return parent[:36] + hex.EncodeToString(b[:]) + parent[52:]
}

// TraceID is the trace id of a traceparent, "" when it is not valid.
func TraceID(tp string) string {
	if !ValidTraceparent(tp) {
		return ""
	}
	return tp[3:35]
}

type traceKey struct{}

// WithTraceparent returns ctx carrying tp (ignored unless valid).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if !ValidTraceparent(tp) {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tp)
}

// TraceparentFrom returns the traceparent ctx carries, or "".
func TraceparentFrom(ctx context.Context) string {
	tp, _ := ctx.Value(traceKey{}).(string)
	return tp
}

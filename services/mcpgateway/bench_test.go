package mcpgateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkAllowedCall measures an allowed (read-only) call through the
// gateway — review over Countersign's HTTP API, then the upstream — against
// the same call made directly to the upstream, side by side in one run, and
// reports the medians and the added latency.
func BenchmarkAllowedCall(b *testing.B) {
	s := startServe(b)
	ctx := context.Background()
	direct := func() *mcp.ClientSession {
		up := newUpstream(&notes{})
		t1, t2 := mcp.NewInMemoryTransports()
		if _, err := up.Connect(ctx, t1, nil); err != nil {
			b.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, t2, nil)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}()
	via := newRigOn(b, s, nil).session
	params := &mcp.CallToolParams{Name: "read_note", Arguments: json.RawMessage(`{"id":"a"}`)}
	measure := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %v", err, res)
		}
		return time.Since(start)
	}
	for range 50 { // warm up both paths
		measure(direct)
		measure(via)
	}
	var d, g []time.Duration
	b.ResetTimer()
	for b.Loop() {
		d = append(d, measure(direct))
		g = append(g, measure(via))
	}
	b.StopTimer()
	slices.Sort(d)
	slices.Sort(g)
	med := func(x []time.Duration) float64 { return float64(x[len(x)/2].Microseconds()) }
	b.ReportMetric(med(d), "direct-p50-µs")
	b.ReportMetric(med(g), "gateway-p50-µs")
	b.ReportMetric(med(g)-med(d), "added-p50-µs")
	b.ReportMetric(float64(g[len(g)*99/100].Microseconds()), "gateway-p99-µs")
}

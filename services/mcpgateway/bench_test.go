package mcpgateway_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/services/mcpgateway"
)

// BenchmarkAllowedCall measures an allowed (read-only) call made through
// `countersign mcp` — the real binary on stdio, as an MCP client's config
// launches it, reviewing over Countersign's HTTP API with a real
// `countersign serve` on loopback — against the same call made directly to
// the same kind of upstream process on stdio, alternating in one run. It
// reports both medians, the added latency at the median, their ratio, and
// the gateway's p99.
//
//   - stdio-notes: the upstream is a Go SDK server (this test binary).
//   - stdio-filesystem: the upstream is the filesystem server from npm
//     (node), the configuration of docs/mcp.md.
//   - in-memory: client, gateway and upstream in this process, the
//     review the only hop outside it.
func BenchmarkAllowedCall(b *testing.B) {
	// Allowed calls count against the API's review rate budget (20 a
	// second by default); the bench makes more.
	cfg := filepath.Join(b.TempDir(), "countersign.yaml")
	if err := os.WriteFile(cfg, []byte("budgets:\n  review_rate: -1\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	s := startServeArgs(b, "", "--config", cfg, "--policy", "../../deploy/policy.yaml")
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "COUNTERSIGN_URL="+s.url, "COUNTERSIGN_TOKEN="+s.token,
		upstreamEnv+"="+filepath.Join(b.TempDir(), "upstream.log"))
	gatewayCmd := func(name string, upstream ...string) *exec.Cmd {
		args := append([]string{"mcp", "--name", name, "--run-id", "bench-" + name, "--log-level", "warn", "--"}, upstream...)
		cmd := exec.Command(binary, args...)
		cmd.Env = env
		return cmd
	}
	b.Run("stdio-notes", func(b *testing.B) {
		direct := exec.Command(self)
		direct.Env = env
		benchPair(b, commandSession(b, direct), commandSession(b, gatewayCmd("notes", self)),
			&mcp.CallToolParams{Name: "read_note", Arguments: json.RawMessage(`{"id":"a"}`)})
	})
	b.Run("stdio-filesystem", func(b *testing.B) {
		installNPM(b)
		dir := b.TempDir()
		file := filepath.Join(dir, "hello.txt")
		if err := os.WriteFile(file, []byte("hello from disk"), 0o600); err != nil {
			b.Fatal(err)
		}
		node, err := exec.LookPath("node")
		if err != nil {
			b.Fatal(err)
		}
		server := filepath.Join("testdata", "npm", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
		direct := exec.Command(node, server, dir)
		direct.Env = env
		args, _ := json.Marshal(map[string]string{"path": file})
		benchPair(b, commandSession(b, direct), commandSession(b, gatewayCmd("files", node, server, dir)),
			&mcp.CallToolParams{Name: "read_text_file", Arguments: json.RawMessage(args)})
	})
	b.Run("review", func(b *testing.B) {
		// The review alone, for reference: the one round trip the gateway
		// adds to an allowed call.
		c := s.client(b)
		run := contracts.Run{ID: "bench-review", Agent: "mcp", Labels: map[string]string{mcpgateway.LabelReadOnly: "true"}}
		call := []client.ToolCall{{ID: "read", Name: "notes.read_note", Arguments: json.RawMessage(`{"id":"a"}`)}}
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := c.Review(context.Background(), run, call)
			if err != nil || res[0].Verdict != client.Allowed {
				b.Fatalf("review: %v %+v", err, res)
			}
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "review-p50-µs")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("in-memory", func(b *testing.B) {
		up := newUpstream(&notes{})
		t1, t2 := mcp.NewInMemoryTransports()
		if _, err := up.Connect(context.Background(), t1, nil); err != nil {
			b.Fatal(err)
		}
		direct, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(), t2, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { direct.Close() })
		benchPair(b, direct, newRigOn(b, s, nil).session,
			&mcp.CallToolParams{Name: "read_note", Arguments: json.RawMessage(`{"id":"a"}`)})
	})
}

// commandSession is a Go SDK client session with cmd on its stdio.
func commandSession(b *testing.B, cmd *exec.Cmd) *mcp.ClientSession {
	b.Helper()
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// benchPair times the call on direct and through the gateway, one after
// the other, and reports the medians, the added latency, the ratio and the
// gateway's p99.
func benchPair(b *testing.B, direct, gateway *mcp.ClientSession, params *mcp.CallToolParams) {
	ctx := context.Background()
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
		measure(gateway)
	}
	var d, g []time.Duration
	for b.Loop() {
		d = append(d, measure(direct))
		g = append(g, measure(gateway))
	}
	slices.Sort(d)
	slices.Sort(g)
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 }
	md, mg := d[len(d)/2], g[len(g)/2]
	b.ReportMetric(us(md), "direct-p50-µs")
	b.ReportMetric(us(mg), "gateway-p50-µs")
	b.ReportMetric(us(mg-md), "added-p50-µs")
	b.ReportMetric(float64(mg)/float64(md), "gateway/direct-p50")
	b.ReportMetric(us(g[len(g)*99/100]), "gateway-p99-µs")
	b.ReportMetric(0, "ns/op")
}

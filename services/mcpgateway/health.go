package mcpgateway

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// health is whether the upstream answered the gateway's last attempt to
// connect, and how many attempts failed.
type health struct {
	mu       sync.Mutex
	known    bool // an attempt was made
	up       bool
	failures uint64
	lastErr  string
}

// Health is what the gateway knows of its upstream.
type Health struct {
	// Up: the last attempt to connect to the upstream succeeded.
	Up bool
	// Failures counts the attempts to connect that failed.
	Failures uint64
	// LastError is the error of the last failed attempt.
	LastError string
}

func (h *health) failed(log *slog.Logger, name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up || !h.known {
		log.Warn("the upstream MCP server cannot be reached; its tools are unavailable until it answers",
			slog.String("upstream", name), slog.Any("err", err))
	}
	h.known, h.up = true, false
	h.failures++
	h.lastErr = err.Error()
}

func (h *health) reached() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known, h.up = true, true
}

// Health says whether the upstream answered the gateway's last attempt to
// connect to it, and how many attempts failed.
func (g *Gateway) Health() Health {
	g.health.mu.Lock()
	defer g.health.mu.Unlock()
	return Health{Up: g.health.up, Failures: g.health.failures, LastError: g.health.lastErr}
}

// writeMetrics writes the gateways' upstream health in the Prometheus text
// format.
func writeMetrics(w io.Writer, gateways []*Gateway) {
	var b strings.Builder
	b.WriteString("# HELP countersign_mcp_upstream_up Whether the upstream MCP server answered the gateway's last attempt to connect (1) or not (0).\n")
	b.WriteString("# TYPE countersign_mcp_upstream_up gauge\n")
	for _, g := range gateways {
		up := 0
		if g.Health().Up {
			up = 1
		}
		fmt.Fprintf(&b, "countersign_mcp_upstream_up{upstream=%q} %d\n", g.cfg.Name, up)
	}
	b.WriteString("# HELP countersign_mcp_upstream_connect_failures_total Attempts to connect to the upstream MCP server that failed.\n")
	b.WriteString("# TYPE countersign_mcp_upstream_connect_failures_total counter\n")
	for _, g := range gateways {
		fmt.Fprintf(&b, "countersign_mcp_upstream_connect_failures_total{upstream=%q} %d\n", g.cfg.Name, g.Health().Failures)
	}
	_, _ = io.WriteString(w, b.String())
}

// Name is the upstream's name (Config.Name).
func (g *Gateway) Name() string { return g.cfg.Name }

package mcpgateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Callers maps the hex SHA-256 of a bearer token to the caller it
// authenticates (their user id, which becomes requested_by).
type Callers map[string]string

// HashToken is the hex SHA-256 of a bearer token, as Callers keys it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Handler serves the gateways over Streamable HTTP, each at /mcp/<name>,
// and the health of their upstreams at /metrics (Prometheus text format:
// countersign_mcp_upstream_up and
// countersign_mcp_upstream_connect_failures_total, by upstream).
// Every request needs a bearer token that callers knows; the caller is the
// requester of the session's calls and owns the session. A body that is
// not JSON, not JSON-RPC, over the size limit, or a request for a method
// the gateway does not serve, is answered with a JSON-RPC error and reaches
// no server.
func Handler(gateways []*Gateway, callers Callers) http.Handler {
	mux := http.NewServeMux()
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		id, ok := callers[HashToken(token)]
		if !ok {
			return nil, fmt.Errorf("%w: unknown bearer token", auth.ErrInvalidToken)
		}
		// Tokens do not expire by themselves; the list of callers decides.
		return &auth.TokenInfo{UserID: id, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	bearer := auth.RequireBearerToken(verify, nil)
	limit := maxBody(gateways)
	for _, g := range gateways {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() },
			&mcp.StreamableHTTPOptions{MaxRequestBodyBytes: limit})
		mux.Handle("/mcp/"+g.cfg.Name, bearer(screen(limit, h)))
	}
	// The upstreams' health, for whoever holds a caller's token.
	mux.Handle("/metrics", bearer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		writeMetrics(w, gateways)
	})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		names := make([]string, len(gateways))
		for i, g := range gateways {
			names[i] = "/mcp/" + g.cfg.Name
		}
		http.Error(w, "not found: the MCP servers here are "+strings.Join(names, ", "), http.StatusNotFound)
	})
	return mux
}

// maxBody is the largest message the gateways take: DefaultMaxBody, or
// room for the largest arguments, JSON-escaped.
func maxBody(gateways []*Gateway) int64 {
	n := int64(DefaultMaxBody)
	for _, g := range gateways {
		n = max(n, 2*int64(g.cfg.MaxArguments)+64<<10)
	}
	return n
}

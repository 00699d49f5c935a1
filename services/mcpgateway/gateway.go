package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Gateway is an MCP server that passes everything through to one upstream
// MCP server and gates tools/call with Countersign. It is safe for
// concurrent use; serve it with Run (stdio) or Handler (Streamable HTTP).
type Gateway struct {
	cfg  Config
	book callBook
	// waiting counts the calls waiting on each approval.
	waiting waiters
	health  health

	mu      sync.Mutex
	server  *mcp.Server   // what new clients are served by
	servers []*mcp.Server // every server a client may still be on
	links   map[*mcp.ServerSession]*link
	spare   *link // an upstream session not used by a client yet
	stop    context.CancelFunc

	announcing sync.Mutex // one announce at a time
}

// New connects to the upstream once, to mirror its capabilities, and
// returns the gateway. The connection is kept for the first client. When
// the upstream cannot be reached, New fails, unless Config.ConnectLater
// says to start without it (see there).
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mcpgateway: %w", err)
	}
	g := &Gateway{cfg: cfg, links: map[*mcp.ServerSession]*link{}}
	g.book.init()
	first := &link{g: g}
	up, err := first.session(ctx)
	if err == nil {
		g.spare = first
		g.serve(g.newServer(up.InitializeResult()))
		return g, nil
	}
	if !cfg.ConnectLater {
		return nil, err
	}
	g.serve(g.newServer(nil))
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stop = stop
	go g.reconnect(rctx)
	return g, nil
}

// newServer is the MCP server the gateway presents to its clients, given
// the upstream's initialize result; nil while the upstream has not been
// reached: then tools only, with list-changed notifications, so that a
// client hears when they come.
func (g *Gateway) newServer(init *mcp.InitializeResult) *mcp.Server {
	impl := &mcp.Implementation{Name: g.cfg.Name, Version: "countersign"}
	opts := &mcp.ServerOptions{Logger: g.cfg.Logger, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}}
	if init != nil {
		if si := init.ServerInfo; si != nil {
			impl = &mcp.Implementation{Name: si.Name, Title: si.Title, Version: si.Version}
		}
		opts.Instructions, opts.Capabilities = init.Instructions, mirror(init.Capabilities)
		if r := opts.Capabilities.Resources; r != nil && r.Subscribe {
			opts.SubscribeHandler, opts.UnsubscribeHandler = g.subscribe, g.unsubscribe
		}
	}
	s := mcp.NewServer(impl, opts)
	s.AddReceivingMiddleware(g.middleware)
	return s
}

// serve makes s the server of new clients.
func (g *Gateway) serve(s *mcp.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.server = s
	g.servers = append(g.servers, s)
}

// allServers are the servers clients may be on.
func (g *Gateway) allServers() []*mcp.Server {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.servers)
}

// reconnect tries to reach an upstream that could not be reached when the
// gateway started, backing off from ReconnectMin to ReconnectMax, until
// it answers or ctx ends; then new clients get the upstream's
// capabilities, and the clients already there hear that the tools changed.
func (g *Gateway) reconnect(ctx context.Context) {
	wait := ReconnectMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l := &link{g: g}
		up, err := l.session(ctx)
		if err != nil {
			wait = min(2*wait, ReconnectMax)
			g.cfg.Logger.Debug("the upstream MCP server still cannot be reached", slog.String("upstream", g.cfg.Name), slog.Any("err", err))
			continue
		}
		g.cfg.Logger.Info("the upstream MCP server is reachable; serving it", slog.String("upstream", g.cfg.Name))
		g.mu.Lock()
		if g.spare == nil {
			g.spare, l = l, nil
		}
		g.mu.Unlock()
		if l != nil {
			l.close()
		}
		g.serve(g.newServer(up.InitializeResult()))
		g.announce(changedTools)
		return
	}
}

// mirror is what the gateway offers its clients, given what the upstream
// offers: tools always (calls of unknown tools are gated like any other),
// the rest as the upstream has them, list-changed notifications and
// resource subscriptions included.
func mirror(c *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	if c == nil {
		return caps
	}
	if c.Tools != nil {
		caps.Tools.ListChanged = c.Tools.ListChanged
	}
	if c.Resources != nil {
		caps.Resources = &mcp.ResourceCapabilities{ListChanged: c.Resources.ListChanged, Subscribe: c.Resources.Subscribe}
	}
	if c.Prompts != nil {
		caps.Prompts = &mcp.PromptCapabilities{ListChanged: c.Prompts.ListChanged}
	}
	// Logging is deprecated from 2026-07-28 on and still served to clients
	// on earlier versions: an upstream that logs is passed on.
	//lint:ignore SA1019 passed through while clients still use it
	if c.Logging != nil {
		//lint:ignore SA1019 passed through while clients still use it
		caps.Logging = &mcp.LoggingCapabilities{}
	}
	if c.Completions != nil {
		caps.Completions = &mcp.CompletionCapabilities{}
	}
	return caps
}

// Server is the MCP server the gateway presents to new clients. It is
// another one once an upstream that could not be reached at the start is
// reached (see Config.ConnectLater).
func (g *Gateway) Server() *mcp.Server {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.server
}

// Run serves one client over t (for instance &mcp.StdioTransport{}) until
// the client goes away or ctx ends. Over stdio (an *mcp.StdioTransport), a
// line that is not JSON-RPC, is over the size limit or asks for a method
// the gateway does not serve is answered with a JSON-RPC error, and the
// session goes on.
func (g *Gateway) Run(ctx context.Context, t mcp.Transport) error {
	if _, ok := t.(*mcp.StdioTransport); ok {
		t = &screenedIO{in: os.Stdin, out: os.Stdout, maxLine: int(maxBody([]*Gateway{g}))}
	}
	return g.Server().Run(ctx, t)
}

// Close closes every upstream session.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.stop != nil {
		g.stop()
	}
	ls := make([]*link, 0, len(g.links)+1)
	for _, l := range g.links {
		ls = append(ls, l)
	}
	if g.spare != nil {
		ls = append(ls, g.spare)
	}
	g.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return nil
}

// linkFor returns the upstream link of a client session, creating it on
// the session's first request.
func (g *Gateway) linkFor(ss *mcp.ServerSession, extra *mcp.RequestExtra) (*link, error) {
	caller := ""
	if extra != nil && extra.TokenInfo != nil {
		caller = extra.TokenInfo.UserID
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.links[ss]; l != nil {
		if l.caller != caller {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this MCP session belongs to another caller"}
		}
		return l, nil
	}
	l := g.spare
	g.spare = nil
	if l == nil {
		l = &link{g: g}
	}
	l.down, l.caller = ss, caller
	g.links[ss] = l
	go func() {
		_ = ss.Wait()
		g.mu.Lock()
		delete(g.links, ss)
		g.mu.Unlock()
		l.close()
	}()
	return l, nil
}

// middleware serves every request of a client: tools/call is gated, the
// other MCP methods go to the upstream, the rest (initialize, ping, ...)
// is the SDK's.
func (g *Gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok {
			return next(ctx, method, req)
		}
		switch method {
		case "tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read",
			"prompts/list", "prompts/get", "completion/complete":
		case "resources/subscribe", "resources/unsubscribe", "subscriptions/listen":
			// The SDK keeps the subscriptions; the link must be the caller's.
			if _, err := g.linkFor(ss, req.GetExtra()); err != nil {
				return nil, err
			}
			return next(ctx, method, req)
		default:
			return next(ctx, method, req)
		}
		l, err := g.linkFor(ss, req.GetExtra())
		if err != nil {
			return nil, err
		}
		if method == "tools/call" {
			return g.callTool(ctx, l, req.(*mcp.CallToolRequest))
		}
		up, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			res, err := up.ListTools(ctx, r.Params)
			if err == nil {
				l.remember(res.Tools)
			}
			return res, l.upstreamError(up, err)
		case *mcp.ListResourcesRequest:
			res, err := up.ListResources(ctx, r.Params)
			return res, l.upstreamError(up, err)
		case *mcp.ListResourceTemplatesRequest:
			res, err := up.ListResourceTemplates(ctx, r.Params)
			return res, l.upstreamError(up, err)
		case *mcp.ReadResourceRequest:
			res, err := up.ReadResource(ctx, r.Params)
			return res, l.upstreamError(up, err)
		case *mcp.ListPromptsRequest:
			res, err := up.ListPrompts(ctx, r.Params)
			return res, l.upstreamError(up, err)
		case *mcp.GetPromptRequest:
			res, err := up.GetPrompt(ctx, r.Params)
			return res, l.upstreamError(up, err)
		case *mcp.CompleteRequest:
			res, err := up.Complete(ctx, r.Params)
			return res, l.upstreamError(up, err)
		}
		return next(ctx, method, req)
	}
}

// upstreamError passes the upstream's JSON-RPC errors through and names the
// upstream in any other failure (a closed connection, a crash).
func upstreamError(err error) error {
	if err == nil {
		return nil
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the upstream MCP server failed: " + err.Error()}
}

// link is one client session's connection to the upstream.
type link struct {
	g      *Gateway
	down   *mcp.ServerSession // nil until the first request (the spare)
	caller string             // the authenticated caller (HTTP), else ""

	mu    sync.Mutex
	up    *mcp.ClientSession
	tools map[string]*mcp.Tool
	held  map[string]*held // by requestState
	// running counts the calls forwarded to the upstream, by tool.
	running map[string]int
	// schemas are the tools' input schemas in JSON, as reviews carry them.
	schemas map[*mcp.Tool]json.RawMessage
}

// session returns the upstream session, connecting (again) when there is
// none or the last one ended.
func (l *link) session(ctx context.Context) (*mcp.ClientSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up != nil {
		return l.up, nil
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "countersign-mcp-gateway", Version: "1"}, &mcp.ClientOptions{
		// No roots: the gateway has none of its own to offer, and an
		// upstream that asked would narrow what it may touch to nothing.
		Capabilities:                &mcp.ClientCapabilities{},
		ElicitationHandler:          l.elicit,
		ToolListChangedHandler:      l.toolsChanged,
		PromptListChangedHandler:    l.promptsChanged,
		ResourceListChangedHandler:  l.resourcesChanged,
		ResourceUpdatedHandler:      l.resourceUpdated,
		ProgressNotificationHandler: l.progress,
		LoggingMessageHandler:       l.logMessage, //lint:ignore SA1019 an upstream's log messages pass through while clients still use them
	})
	up, err := l.g.cfg.Dial(ctx, c)
	if err != nil {
		l.g.health.failed(l.g.cfg.Logger, l.g.cfg.Name, err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("cannot reach the upstream MCP server %q: %v; its tools are unavailable until it answers (the gateway tries again)", l.g.cfg.Name, err)}
	}
	l.g.health.reached()
	l.up = up
	go func() {
		_ = up.Wait()
		l.mu.Lock()
		if l.up == up {
			l.up = nil
		}
		l.mu.Unlock()
	}()
	return up, nil
}

// lost forgets the upstream session up when err says its connection
// closed, so that the next request connects again.
func (l *link) lost(up *mcp.ClientSession, err error) {
	if err == nil || !errors.Is(err, mcp.ErrConnectionClosed) {
		return
	}
	l.mu.Lock()
	if l.up == up {
		l.up = nil
	}
	l.mu.Unlock()
	_ = up.Close()
}

// upstreamError is upstreamError after lost.
func (l *link) upstreamError(up *mcp.ClientSession, err error) error {
	l.lost(up, err)
	return upstreamError(err)
}

func (l *link) close() {
	l.mu.Lock()
	up := l.up
	l.up = nil
	hs := l.held
	l.held = nil
	l.mu.Unlock()
	for _, h := range hs {
		h.cancel()
	}
	if up != nil {
		_ = up.Close()
	}
}

// hold keeps a held call until release.
func (l *link) hold(h *held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[string]*held{}
	}
	l.held[h.state] = h
}

func (l *link) release(h *held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, h.state)
}

// heldCall returns the held call a client's requestState names.
func (l *link) heldCall(state string) *held {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[state]
}

// onlyHeld returns the link's one held call, nil when there are none or
// several: an upstream on an earlier protocol version sends its questions
// as requests of their own, which do not say which call they belong to.
func (l *link) onlyHeld() *held {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) != 1 {
		return nil
	}
	for _, h := range l.held {
		return h
	}
	return nil
}

// remember keeps the tools' annotations for the policy.
func (l *link) remember(tools []*mcp.Tool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tools == nil {
		l.tools = map[string]*mcp.Tool{}
	}
	for _, t := range tools {
		if t != nil {
			if old := l.tools[t.Name]; old != nil {
				delete(l.schemas, old)
			}
			l.tools[t.Name] = t
		}
	}
}

// schema is tool's input schema in JSON (nil without one), encoded once
// per description of the tool.
func (l *link) schema(tool *mcp.Tool) json.RawMessage {
	if tool == nil || tool.InputSchema == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.schemas[tool]; ok {
		return b
	}
	b, err := json.Marshal(tool.InputSchema)
	if err != nil {
		return nil
	}
	if l.schemas == nil {
		l.schemas = map[*mcp.Tool]json.RawMessage{}
	}
	l.schemas[tool] = b
	return b
}

// tool returns the upstream's description of name, listing the tools when
// it is not known yet; nil when the upstream does not list it.
func (l *link) tool(ctx context.Context, up *mcp.ClientSession, name string) *mcp.Tool {
	l.mu.Lock()
	t := l.tools[name]
	l.mu.Unlock()
	if t != nil {
		return t
	}
	var all []*mcp.Tool
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			break
		}
		all = append(all, t)
	}
	l.remember(all)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tools[name]
}

// progress relays the upstream's progress on a forwarded call (which
// carries the client's own progress token) to the client.
func (l *link) progress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	if l.down != nil && req.Params != nil {
		_ = l.down.NotifyProgress(ctx, req.Params)
	}
}

// logMessage relays the upstream's log messages to the client.
func (l *link) logMessage(ctx context.Context, req *mcp.LoggingMessageRequest) {
	if l.down != nil && req.Params != nil {
		_ = l.down.Log(ctx, req.Params) //lint:ignore SA1019 passed through while clients still use it
	}
}

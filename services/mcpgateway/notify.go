package mcpgateway

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What changed, for announce.
const (
	changedTools = iota
	changedPrompts
	changedResources
)

// placeholder names the feature announce adds and removes at once.
const placeholder = "countersign_list_changed"

// announce tells the gateway's clients that the upstream's list of tools,
// prompts or resources changed (notifications/.../list_changed), so that
// their next list shows the change. The SDK sends these notifications when
// a server's own features change, to each session in the way its protocol
// version wants (on 2026-07-28, to sessions listening for them); the
// gateway serves its lists from the upstream, not from features of its
// own, so it adds and removes a placeholder feature, which no client sees.
// Changes within a few milliseconds make one notification.
func (g *Gateway) announce(what int) {
	g.announcing.Lock()
	defer g.announcing.Unlock()
	for _, s := range g.allServers() {
		switch what {
		case changedTools:
			s.AddTool(&mcp.Tool{Name: placeholder, InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, errPlaceholder })
			s.RemoveTools(placeholder)
		case changedPrompts:
			s.AddPrompt(&mcp.Prompt{Name: placeholder},
				func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) { return nil, errPlaceholder })
			s.RemovePrompts(placeholder)
		case changedResources:
			uri := "countersign:" + placeholder
			s.AddResource(&mcp.Resource{URI: uri, Name: placeholder},
				func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return nil, errPlaceholder
				})
			s.RemoveResources(uri)
		}
	}
}

var errPlaceholder = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no such feature"}

// toolsChanged: the upstream's tools changed. Their annotations are
// forgotten, so that the policy sees the new ones.
func (l *link) toolsChanged(context.Context, *mcp.ToolListChangedRequest) {
	l.mu.Lock()
	l.tools, l.schemas = nil, nil
	l.mu.Unlock()
	l.g.announce(changedTools)
}

func (l *link) promptsChanged(context.Context, *mcp.PromptListChangedRequest) {
	l.g.announce(changedPrompts)
}

func (l *link) resourcesChanged(context.Context, *mcp.ResourceListChangedRequest) {
	l.g.announce(changedResources)
}

// resourceUpdated relays notifications/resources/updated to the clients
// subscribed to the resource.
func (l *link) resourceUpdated(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	if req.Params != nil {
		for _, s := range l.g.allServers() {
			_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: req.Params.URI})
		}
	}
}

// subscribe passes a client's resources/subscribe (or the resource
// subscriptions of its subscriptions/listen) to its upstream session.
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	_, up, err := g.upstreamOf(ctx, req.Session)
	if err != nil {
		return err
	}
	return upstreamError(up.Subscribe(ctx, &mcp.SubscribeParams{URI: req.Params.URI}))
}

func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	// Also when the client's listen ended: the upstream is told regardless.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, up, err := g.upstreamOf(ctx, req.Session)
	if err != nil {
		return err
	}
	return upstreamError(up.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: req.Params.URI}))
}

// upstreamOf returns the link and upstream session of a client session
// that made a request before (the middleware created its link).
func (g *Gateway) upstreamOf(ctx context.Context, ss *mcp.ServerSession) (*link, *mcp.ClientSession, error) {
	g.mu.Lock()
	l := g.links[ss]
	g.mu.Unlock()
	if l == nil {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("no upstream session for this client of %q", g.cfg.Name)}
	}
	up, err := l.session(ctx)
	return l, up, err
}

package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// elicit answers the upstream's elicitation (elicitation/create, or an
// input request of a call): the client answers when it supports
// elicitation — in the answer to its tools/call on protocol 2026-07-28 and
// later, as elicitation/create before — otherwise the question goes to the
// approvers as a human-input request whose answer schema is the
// elicitation's.
func (l *link) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	p := req.Params
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "elicitation/create needs params"}
	}
	h := heldFrom(ctx)
	if h == nil {
		h = l.onlyHeld()
	}
	if h != nil {
		return l.g.ask(ctx, l, h, p), nil
	}
	if down := l.down; down != nil {
		if ip := down.InitializeParams(); ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil {
			res, err := down.Elicit(ctx, p)
			if err == nil {
				return res, nil
			}
			// A client that cannot take the question now (its protocol
			// version wants it asked another way): the approvers answer.
			l.g.cfg.Logger.Debug("client elicitation failed; asking the approvers", slog.Any("err", err))
		}
	}
	if p.Mode == "url" {
		return &mcp.ElicitResult{Action: contracts.AnswerDecline}, nil
	}
	q := client.Question{Text: fmt.Sprintf("The MCP server %q asks: %s", l.g.cfg.Name, p.Message)}
	if tool := l.asking(ctx); tool != "" {
		q.Text = fmt.Sprintf("The MCP server %q asks, while it runs the tool %s: %s", l.g.cfg.Name, tool, p.Message)
	}
	if p.RequestedSchema != nil {
		b, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "elicitation/create: requestedSchema: " + err.Error()}
		}
		q.Schema = b
	}
	run := l.g.questionRun(l, l.asking(ctx))
	ans, err := l.g.cfg.Countersign.Ask(ctx, run, q)
	if err != nil {
		l.g.cfg.Logger.Warn("elicitation could not be asked", slog.Any("err", err))
		return &mcp.ElicitResult{Action: contracts.AnswerCancel}, nil
	}
	if ans.Status != "answered" || ans.Answer == nil {
		return &mcp.ElicitResult{Action: contracts.AnswerCancel}, nil
	}
	res := &mcp.ElicitResult{Action: ans.Answer.Action}
	if len(ans.Answer.Content) > 0 && ans.Answer.Action == contracts.AnswerAccept {
		if err := json.Unmarshal(ans.Answer.Content, &res.Content); err != nil {
			return &mcp.ElicitResult{Action: contracts.AnswerCancel}, nil
		}
	}
	return res, nil
}

// callingKey carries, in the context of a call forwarded to the upstream,
// the name of its tool: the SDK asks a question the upstream returns with
// a call's result (protocol 2026-07-28) in that call's context.
type callingKey struct{}

// asking names the tool whose call the upstream asks a question in: the
// call of ctx, else the one tool the link's forwarded calls are running
// (an upstream on an earlier protocol version sends its questions as
// requests of their own, which do not say which call they belong to);
// "" when that is not known.
func (l *link) asking(ctx context.Context) string {
	if name, ok := ctx.Value(callingKey{}).(string); ok {
		return name
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.running) != 1 {
		return ""
	}
	for name := range l.running {
		return name
	}
	return ""
}

// forwarding counts a call of tool forwarded to the upstream until done.
func (l *link) forwarding(tool string) (done func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[string]int{}
	}
	l.running[tool]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.running[tool]--; l.running[tool] <= 0 {
			delete(l.running, tool)
		}
	}
}

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
	if p.RequestedSchema != nil {
		b, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "elicitation/create: requestedSchema: " + err.Error()}
		}
		q.Schema = b
	}
	run := l.g.run(l, "", nil)
	delete(run.Labels, LabelTool)
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

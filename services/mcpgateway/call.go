package mcpgateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// maxGenerations bounds how many used-up approvals of one call a tools/call
// steps over before it gives up (see callBook).
const maxGenerations = 1000

// callBook remembers, per call (server, tool, canonical arguments), the
// first generation of its tool call id that is not used up yet, and which
// approvals this process has claimed. A call's approval is used up once it
// ran or its decision was handed to the model; the next identical call is a
// new request (generation n+1). After a restart the book is empty: the
// first identical call steps over the generations whose approvals were
// claimed, and re-attaches to the first one that was not.
type callBook struct {
	mu      sync.Mutex
	next    map[string]int
	claimed map[string]bool
}

func (b *callBook) init() {
	b.next = map[string]int{}
	b.claimed = map[string]bool{}
}

func (b *callBook) generation(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next[key]
}

// usedUp marks generation gen of key as used up.
func (b *callBook) usedUp(key string, gen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next[key] <= gen {
		b.next[key] = gen + 1
	}
}

// take reports whether this process may claim eventID: true once.
func (b *callBook) take(eventID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.claimed[eventID] {
		return false
	}
	b.claimed[eventID] = true
	return true
}

// metaKey is the key of the gateway's own entry in a tool result's _meta.
const metaKey = "countersign"

// ReceiptMetaKey is the key of a forwarded call's receipt in the _meta of
// its tools/call request (see Config.Receipts): a compact JWS the upstream
// verifies with contracts/receipt for the tool "<Name>.<tool>" and the
// call's arguments.
const ReceiptMetaKey = "countersign/receipt"

// callTool gates one tools/call.
func (g *Gateway) callTool(ctx context.Context, l *link, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := req.Params
	if p == nil || p.Name == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call needs the name of a tool"}
	}
	args := bytes.TrimSpace(p.Arguments)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if g.cfg.MaxArguments > 0 && len(args) > g.cfg.MaxArguments {
		return toolError(fmt.Sprintf("The arguments of %s are %d bytes, over this gateway's limit of %d bytes. The call was not made.",
			p.Name, len(args), g.cfg.MaxArguments), nil), nil
	}
	if args[0] != '{' {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: arguments must be a JSON object"}
	}
	canon, err := contracts.Canonicalize(args)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: arguments: " + err.Error()}
	}
	up, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	tool := l.tool(ctx, up, p.Name)
	run := g.run(l, p.Name, tool)
	key := callKey(g.cfg.Name, p.Name, canon)
	call := client.ToolCall{Name: g.cfg.Name + "." + p.Name, Arguments: canon}
	if tool != nil && tool.InputSchema != nil {
		if b, err := json.Marshal(tool.InputSchema); err == nil {
			call.ToolSchema = b
		}
	}
	log := g.cfg.Logger.With(slog.String("tool", call.Name), slog.String("run_id", run.ID))
	for range maxGenerations {
		gen := g.book.generation(key)
		call.ID = fmt.Sprintf("mcp-%s-%d", key, gen)
		res, err := g.review(ctx, run, &call)
		if err == nil && res.Verdict == client.Pending {
			res, err = g.wait(ctx, req, run, call, res)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			log.Warn("review failed; the call was not made", slog.Any("err", err))
			return toolError(fmt.Sprintf("Countersign could not review this call (%v). The call was not made; try again later.", err), nil), nil
		}
		switch res.Verdict {
		case client.Allowed:
			if res.EventID == "" {
				if g.cfg.Receipts && res.Receipt == "" {
					log.Warn("no receipt for a call the upstream wants one with; the call was not made", slog.String("rule", res.Rule))
					return toolError(noReceipt(g.cfg.Name, res), meta(res)), nil
				}
				return g.forward(ctx, up, req, canon, res)
			}
			if !g.book.take(res.EventID) {
				g.book.usedUp(key, gen)
				continue
			}
			g.book.usedUp(key, gen)
			rec, err := g.cfg.Countersign.Claim(ctx, res.EventID, g.claimID(res.EventID))
			if err != nil {
				if errors.Is(err, client.ErrAlreadyClaimed) {
					continue // claimed by an earlier run of the gateway: a new request
				}
				log.Warn("claim failed; the call was not made", slog.String("event_id", res.EventID), slog.Any("err", err))
				return toolError(fmt.Sprintf("Countersign could not confirm the approval %s (%v). The call was not made.", res.EventID, err), meta(res)), nil
			}
			if rec.Claim != nil {
				res.Receipt = rec.Claim.Receipt
			}
			if g.cfg.Receipts && res.Receipt == "" {
				log.Warn("the claimed approval has no receipt; the call was not made", slog.String("event_id", res.EventID))
				return toolError(noReceipt(g.cfg.Name, res)+fmt.Sprintf(" Its approval %s is used up.", res.EventID), meta(res)), nil
			}
			log.Info("approved call forwarded", slog.String("event_id", res.EventID))
			return g.forward(ctx, up, req, res.Arguments, res)
		case client.AlreadyExecuted:
			g.book.usedUp(key, gen)
			continue
		case client.Pending:
			return awaiting(call.Name, res), nil
		default:
			if res.EventID != "" {
				g.book.usedUp(key, gen)
			}
			return toolError(notRun(res), meta(res)), nil
		}
	}
	return toolError(fmt.Sprintf("This call was approved and run %d times already; ask an operator.", maxGenerations), nil), nil
}

// run is the run a call of tool is reviewed in.
func (g *Gateway) run(l *link, name string, tool *mcp.Tool) contracts.Run {
	labels := maps.Clone(g.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, Labels(g.cfg.Name, tool))
	labels[LabelTool] = name
	run := contracts.Run{ID: g.cfg.RunID, Agent: g.cfg.Agent, RequestedBy: g.cfg.RequestedBy, Tenant: g.cfg.Tenant, Labels: labels}
	if l.caller != "" {
		run.ID = "mcp:" + l.caller + ":" + g.cfg.Name
		run.RequestedBy = l.caller
	}
	return run
}

// callKey identifies a call by server, tool and canonical arguments.
func callKey(server, tool string, canon []byte) string {
	h := sha256.New()
	h.Write([]byte(server))
	h.Write([]byte{'\n'})
	h.Write([]byte(tool))
	h.Write([]byte{'\n'})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// claimID is this process's claim id for an approval: the same for a retry
// within the process, another after a restart (which the arbiter refuses).
func (g *Gateway) claimID(eventID string) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(g.instance+"\n"+eventID)).String()
}

func (g *Gateway) review(ctx context.Context, run contracts.Run, call *client.ToolCall) (client.Result, error) {
	res, err := g.cfg.Countersign.Review(ctx, run, []client.ToolCall{*call})
	if err != nil && len(call.ToolSchema) > 0 && errors.Is(err, client.ErrInvalidField) {
		// A schema the API cannot use (a dialect it does not know, say)
		// must not block the call; edits are then not checked against it.
		call.ToolSchema = nil
		res, err = g.cfg.Countersign.Review(ctx, run, []client.ToolCall{*call})
	}
	if err != nil {
		return client.Result{}, err
	}
	if len(res) != 1 {
		return client.Result{}, fmt.Errorf("the review answered %d results for one call", len(res))
	}
	return res[0], nil
}

// wait waits for the decision on a pending call, up to MaxWait, sending
// progress notifications meanwhile; it returns the call's result then
// (still pending when no one decided in time).
func (g *Gateway) wait(ctx context.Context, req *mcp.CallToolRequest, run contracts.Run, call client.ToolCall, res client.Result) (client.Result, error) {
	deadline := time.Now().Add(g.cfg.MaxWait)
	token := req.Params.GetProgressToken()
	for n := 1; ; n++ {
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		rec, _, err := g.cfg.Countersign.Approval(ctx, res.EventID, min(left, g.cfg.ProgressEvery))
		if err != nil {
			return res, err
		}
		if rec.Status != contracts.StatusPending {
			return g.review(ctx, run, &call)
		}
		if token != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("Awaiting human approval %s in Countersign", res.EventID),
			})
		}
	}
}

// forward calls the upstream with the arguments to run.
func (g *Gateway) forward(ctx context.Context, up *mcp.ClientSession, req *mcp.CallToolRequest, args json.RawMessage, res client.Result) (*mcp.CallToolResult, error) {
	out, err := up.CallTool(ctx, &mcp.CallToolParams{Meta: g.upstreamMeta(req.Params.Meta, res), Name: req.Params.Name, Arguments: args})
	if err != nil {
		if ctx.Err() != nil && res.EventID == "" {
			return nil, ctx.Err()
		}
		var we *jsonrpc.Error
		if res.EventID == "" && errors.As(err, &we) {
			return nil, err
		}
		msg := fmt.Sprintf("The upstream MCP server %q failed during the call: %v.", g.cfg.Name, err)
		if res.EventID != "" {
			msg += fmt.Sprintf(" The call may have run; its approval %s is used up and will not run again.", res.EventID)
		}
		return toolError(msg, meta(res)), nil
	}
	if res.EventID != "" {
		if out.Meta == nil {
			out.Meta = mcp.Meta{}
		}
		out.Meta[metaKey] = meta(res)[metaKey]
		if edited(req.Params.Arguments, args) {
			note := &mcp.TextContent{Text: "Note: a human reviewer changed the arguments before this call ran. It ran with: " + string(args)}
			out.Content = append([]mcp.Content{note}, out.Content...)
		}
	}
	return out, nil
}

// upstreamMeta is the _meta of a forwarded call: the client's, without a
// receipt of its own, plus the call's receipt when the upstream wants it.
func (g *Gateway) upstreamMeta(m mcp.Meta, res client.Result) mcp.Meta {
	_, forged := m[ReceiptMetaKey]
	if !g.cfg.Receipts && !forged {
		return m
	}
	out := maps.Clone(m)
	if out == nil {
		out = mcp.Meta{}
	}
	delete(out, ReceiptMetaKey)
	if g.cfg.Receipts {
		out[ReceiptMetaKey] = res.Receipt
	}
	return out
}

// noReceipt is the message for the model about an allowed call the
// upstream would refuse: it wants a receipt and Countersign gave none.
func noReceipt(server string, res client.Result) string {
	return fmt.Sprintf("The MCP server %q runs only calls with a Countersign receipt, and Countersign gave none for this call (rule %q). "+
		"The call was not made. Tell an operator: the policy rule may need receipt: true.", server, res.Rule)
}

func edited(proposed, ran json.RawMessage) bool {
	if len(bytes.TrimSpace(proposed)) == 0 {
		proposed = json.RawMessage("{}")
	}
	a, err1 := contracts.ArgumentsSHA256(proposed)
	b, err2 := contracts.ArgumentsSHA256(ran)
	return err1 != nil || err2 != nil || a != b
}

func meta(res client.Result) mcp.Meta {
	m := map[string]any{"verdict": res.Verdict}
	if res.EventID != "" {
		m["event_id"] = res.EventID
	}
	if res.Rule != "" {
		m["rule"] = res.Rule
	}
	return mcp.Meta{metaKey: m}
}

func toolError(text string, m mcp.Meta) *mcp.CallToolResult {
	return &mcp.CallToolResult{Meta: m, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// notRun is the message for the model about a call that did not run.
func notRun(res client.Result) string {
	reason := res.Reason
	switch res.Verdict {
	case client.Denied:
		if reason == "" {
			reason = "The policy does not allow this call."
		}
		return "Countersign did not allow this call; it was not run. " + reason
	case client.Responded:
		return "A human reviewer did not run this call and answered instead: " + reason
	}
	if reason == "" {
		reason = "The call was not run (" + res.Verdict + ")."
	}
	return reason
}

// awaiting is the answer to a call still waiting for a human after MaxWait.
func awaiting(tool string, res client.Result) *mcp.CallToolResult {
	text := fmt.Sprintf("The call %s is awaiting human approval in Countersign (approval %s). It has not run yet. "+
		"Call this tool again with exactly the same arguments to pick up the decision: that re-attaches to the same approval "+
		"and does not create a second request.", tool, res.EventID)
	return toolError(text, meta(res))
}

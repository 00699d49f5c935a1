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

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// errLapsed matches a claim refused because the approval lapsed.
var errLapsed = &client.Error{Code: contracts.ReasonApprovalLapsed}

// maxGenerations bounds how many used-up approvals of one call a tools/call
// steps over before it gives up (see callBook).
const maxGenerations = 1000

// callBook remembers, per call (server, tool, canonical arguments), the
// first generation of its tool call id known not to be used up. It only
// saves round trips: whether an approval is used up is Countersign's
// record — an approved call is used up once claimed, and a review of a
// claimed approval answers already_executed — so a restarted gateway, with
// an empty book, steps over the claimed generations and finds the same
// one.
type callBook struct {
	mu   sync.Mutex
	next map[string]int
	// running holds, per call, the approvals of it this gateway claimed
	// and is running: an identical call that arrives meanwhile is told
	// so, instead of opening a new approval.
	running map[string]map[string]bool
}

func (b *callBook) init() { b.next, b.running = map[string]int{}, map[string]map[string]bool{} }

// run marks the approval eventID of key as running until done.
func (b *callBook) run(key, eventID string) (done func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[key] == nil {
		b.running[key] = map[string]bool{}
	}
	b.running[key][eventID] = true
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.running[key], eventID)
		if len(b.running[key]) == 0 {
			delete(b.running, key)
		}
	}
}

// runningOf returns an approval of key this gateway is running, "" if
// none.
func (b *callBook) runningOf(key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.running[key] {
		return id
	}
	return ""
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

// metaKey is the key of the gateway's own entry in a tool result's _meta.
const metaKey = "countersign"

// ReceiptMetaKey is the key of a forwarded call's receipt in the _meta of
// its tools/call request (see Config.Receipts): a compact JWS the upstream
// verifies with contracts/receipt for the tool "<Name>.<tool>" and the
// call's arguments.
const ReceiptMetaKey = "countersign/receipt"

// callTool gates one tools/call, or continues a held one (see held).
func (g *Gateway) callTool(ctx context.Context, l *link, req *mcp.CallToolRequest) (mcp.Result, error) {
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
	key := callKey(g.cfg.Name, p.Name, canon)
	if p.RequestState != "" {
		return g.resume(ctx, l, p, key)
	}
	up, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	tool := l.tool(ctx, up, p.Name)
	call := client.ToolCall{Name: g.cfg.Name + "." + p.Name, Arguments: canon}
	call.ToolSchema = l.schema(tool)
	res, err := g.decide(ctx, req, g.run(l, p.Name, tool), key, call)
	if err != nil || res.toolErr != nil {
		return res.toolErr, err
	}
	done := res.done
	if done == nil {
		done = func() {}
	}
	if asksByRoundTrip(req) {
		return g.forwardHeld(ctx, l, up, req, key, res.args, res.Result, done)
	}
	defer done()
	return g.forward(ctx, l, up, req, res.args, res.Result)
}

// decision is the outcome of decide: the call may run with args, or it
// is answered with toolErr.
type decision struct {
	client.Result
	args    json.RawMessage
	toolErr *mcp.CallToolResult
	// done ends the claimed approval's run (see callBook.run); nil when
	// nothing was claimed.
	done func()
}

// decide reviews a call, waits for a human up to MaxWait and claims an
// approval, stepping over generations of the call whose approvals are used
// up.
func (g *Gateway) decide(ctx context.Context, req *mcp.CallToolRequest, run contracts.Run, key string, call client.ToolCall) (decision, error) {
	log := g.cfg.Logger.With(slog.String("tool", call.Name), slog.String("run_id", run.ID))
	if id := g.book.runningOf(key); id != "" {
		// An identical call runs on its approval right now: this one is
		// the same call, not a second run for humans to decide.
		log.Info("an identical call is running on its approval; this call was not run", slog.String("event_id", id))
		return g.claimedElsewhere(call.Name, client.Result{Verdict: client.AlreadyExecuted, EventID: id})
	}
	for range maxGenerations {
		gen := g.book.generation(key)
		call.ID = fmt.Sprintf("mcp-%s-%d", key, gen)
		res, attached, err := g.reviewAndWait(ctx, req, run, &call)
		if err != nil {
			if ctx.Err() != nil {
				if cancelledByClient(ctx) {
					// An explicit cancellation cancels the approval the
					// call opened; a wait that merely ends does not.
					g.withdraw(ctx, log, run, call, key, gen, res.EventID)
				}
				return decision{}, ctx.Err()
			}
			log.Warn("review failed; the call was not made", slog.Any("err", err))
			return refused(fmt.Sprintf("Countersign could not review this call (%v). The call was not made; try again later.", err), client.Result{}), nil
		}
		d, next, err := g.settle(ctx, log, key, gen, attached, call, res)
		if !next {
			return d, err
		}
	}
	return refused(fmt.Sprintf("This call was approved and run %d times already; ask an operator.", maxGenerations), client.Result{}), nil
}

// reviewAndWait reviews one generation of a call and, when it is pending,
// waits for the decision up to MaxWait. attached is the approval of this
// generation the call saw open (pending, or approved and not claimed yet):
// if it turns out used up, an identical call claimed it, and this call is
// told so instead of becoming a new request.
func (g *Gateway) reviewAndWait(ctx context.Context, req *mcp.CallToolRequest, run contracts.Run, call *client.ToolCall) (res client.Result, attached string, err error) {
	res, err = g.review(ctx, run, call)
	if err == nil && res.Verdict == client.Pending {
		attached = res.EventID
		g.waiting.add(attached)
		res, err = g.wait(ctx, req, run, *call, res)
		g.waiting.done(attached)
	}
	return res, attached, err
}

// settle answers a reviewed generation of a call by its verdict; next
// reports that the generation was used up before this call came, so the
// call is a new request in the next generation.
func (g *Gateway) settle(ctx context.Context, log *slog.Logger, key string, gen int, attached string, call client.ToolCall, res client.Result) (d decision, next bool, err error) {
	switch res.Verdict {
	case client.Allowed:
		if res.EventID == "" {
			if g.cfg.Receipts && res.Receipt == "" {
				log.Warn("no receipt for a call the upstream wants one with; the call was not made", slog.String("rule", res.Rule))
				return refused(noReceipt(g.cfg.Name, res), res), false, nil
			}
			return decision{Result: res, args: call.Arguments}, false, nil
		}
		d, err = g.claim(ctx, log, key, gen, call, res)
		return d, false, err
	case client.AlreadyExecuted:
		g.book.usedUp(key, gen)
		if res.EventID != "" && res.EventID == attached {
			// This call waited on the approval: an identical call
			// claimed it and ran it.
			log.Info("an identical call claimed the approval; this call was not run", slog.String("event_id", res.EventID))
			d, err = g.claimedElsewhere(call.Name, res)
			return d, false, err
		}
		return decision{}, true, nil // used up before this call came: this one is a new request
	case client.Pending:
		return decision{Result: res, toolErr: awaiting(call.Name, res)}, false, nil
	default:
		if res.EventID != "" {
			g.book.usedUp(key, gen)
		}
		return refused(notRun(res), res), false, nil
	}
}

// claim claims the approved generation res names for this attempt: the
// call runs with the approved arguments, or is answered with why not.
func (g *Gateway) claim(ctx context.Context, log *slog.Logger, key string, gen int, call client.ToolCall, res client.Result) (decision, error) {
	// A claim id of this attempt alone: of two attempts on one
	// approval (two identical calls at once, a restarted gateway)
	// the arbiter lets one claim it.
	rec, err := g.cfg.Countersign.Claim(ctx, res.EventID, client.NewClaimID())
	if err != nil {
		return g.claimFailed(ctx, log, key, gen, call, res, err)
	}
	done := g.book.run(key, res.EventID)
	g.book.usedUp(key, gen)
	if rec.Claim != nil {
		res.Receipt = rec.Claim.Receipt
	}
	if g.cfg.Receipts && res.Receipt == "" {
		done()
		log.Warn("the claimed approval has no receipt; the call was not made", slog.String("event_id", res.EventID))
		return refused(noReceipt(g.cfg.Name, res)+fmt.Sprintf(" Its approval %s is used up.", res.EventID), res), nil
	}
	log.Info("approved call forwarded", slog.String("event_id", res.EventID))
	return decision{Result: res, args: res.Arguments, done: done}, nil
}

// claimFailed answers a call whose claim of the approval res names failed
// with err: the call is not run.
func (g *Gateway) claimFailed(ctx context.Context, log *slog.Logger, key string, gen int, call client.ToolCall, res client.Result, err error) (decision, error) {
	if errors.Is(err, client.ErrAlreadyClaimed) {
		// An identical call (of this gateway or another) claimed
		// it between this call's look and its claim: it ran
		// there, and runs nowhere else.
		g.book.usedUp(key, gen)
		log.Info("an identical call claimed the approval first; this call was not run", slog.String("event_id", res.EventID))
		return g.claimedElsewhere(call.Name, res)
	}
	if ctx.Err() != nil {
		if cancelledByClient(ctx) {
			// Decided already, so not cancellable: the call is
			// not run, and this gateway does not come back to
			// the approval (it lapses unclaimed).
			g.book.usedUp(key, gen)
		}
		return decision{}, ctx.Err()
	}
	if errors.Is(err, errLapsed) {
		g.book.usedUp(key, gen) // the same call needs a new decision
		return refused(fmt.Sprintf("This call was approved (approval %s), but the approval lapsed before the call could run; "+
			"the call was not run. Call the tool again for a new decision.", res.EventID), res), nil
	}
	log.Warn("claim failed; the call was not made", slog.String("event_id", res.EventID), slog.Any("err", err))
	return refused(fmt.Sprintf("Countersign could not confirm the approval %s (%v). The call was not made.", res.EventID, err), res), nil
}

// refused answers a call that is not run with text for the model, and
// with res's _meta when res has a verdict.
func refused(text string, res client.Result) decision {
	m := mcp.Meta(nil)
	if res.Verdict != "" {
		m = meta(res)
	}
	return decision{Result: res, toolErr: toolError(text, m)}
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

// questionRun is the run an upstream's question is asked in, when it goes
// to the approvers: labelled as a question of the server (and of the tool
// whose call asked it), with none of a tool's hints.
func (g *Gateway) questionRun(l *link, tool string) contracts.Run {
	run := g.run(l, tool, nil)
	for k := range Labels(g.cfg.Name, nil) {
		delete(run.Labels, k)
	}
	maps.Copy(run.Labels, QuestionLabels(g.cfg.Name, tool))
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
func (g *Gateway) forward(ctx context.Context, l *link, up *mcp.ClientSession, req *mcp.CallToolRequest, args json.RawMessage, res client.Result) (*mcp.CallToolResult, error) {
	done := l.forwarding(req.Params.Name)
	out, err := up.CallTool(context.WithValue(ctx, callingKey{}, req.Params.Name),
		&mcp.CallToolParams{Meta: g.upstreamMeta(req.Params.Meta, res), Name: req.Params.Name, Arguments: args})
	done()
	if res.EventID != "" {
		g.reportOutcome(ctx, res.EventID, out, err)
	}
	if err != nil {
		l.lost(up, err)
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
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	}
	out.Meta[metaKey] = meta(res)[metaKey]
	if res.EventID != "" {
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

// meta is the gateway's _meta entry of a result: the verdict, the
// approval and the rule, and the receipt Countersign signed for the call
// when there is one.
func meta(res client.Result) mcp.Meta {
	m := map[string]any{"verdict": res.Verdict}
	if res.EventID != "" {
		m["event_id"] = res.EventID
	}
	if res.Rule != "" {
		m["rule"] = res.Rule
	}
	if res.GrantID != "" {
		m["grant_id"] = res.GrantID
	}
	if res.Receipt != "" {
		m["receipt"] = res.Receipt
	}
	return mcp.Meta{metaKey: m}
}

// claimedElsewhere answers a call whose approval an identical call
// claimed: that call runs it, this one does not, and no new approval is
// opened for it.
func (g *Gateway) claimedElsewhere(tool string, res client.Result) (decision, error) {
	res.Verdict, res.Arguments, res.Receipt = client.AlreadyExecuted, nil, ""
	text := fmt.Sprintf("This call was not run: an identical call of %s claimed its approval %s and ran it there "+
		"(an approval runs its call once). Its result went to that call. Call the tool again only to run it a second time: "+
		"that is a new request for a human to decide.", tool, res.EventID)
	return decision{Result: res, toolErr: toolError(text, meta(res))}, nil
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

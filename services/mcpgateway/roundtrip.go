package mcpgateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// roundTripVersion is the first protocol version in which a server may not
// send elicitation/create while it serves a request: it answers the request
// with input requests instead, and the client calls again with the answers
// (multi round-trip requests).
const roundTripVersion = "2026-07-28"

// held is a forwarded call of a client that answers questions by calling
// again (protocol 2026-07-28 and later): the call to the upstream runs on
// between the client's calls while the client answers a question the
// upstream asked.
type held struct {
	state  string // the requestState the client echoes to continue the call
	name   string // the tool
	key    string // callKey of the tool and arguments
	caps   *mcp.ElicitationCapabilities
	events chan heldEvent
	cancel context.CancelFunc

	mu    sync.Mutex
	asked *question // the question the client was given and has not answered
	n     int       // questions asked so far
	busy  bool      // a tools/call of the client is waiting on the call
}

// question is one elicitation of the upstream waiting for the client.
type question struct {
	id     string
	params *mcp.ElicitParams
	answer chan *mcp.ElicitResult
}

// heldEvent is what a held call tells the client's waiting tools/call: a
// question to pass on, or the upstream's result.
type heldEvent struct {
	q   *question
	res *mcp.CallToolResult
	err error
}

type heldKey struct{}

// heldFrom returns the held call a context belongs to, if any.
func heldFrom(ctx context.Context) *held {
	h, _ := ctx.Value(heldKey{}).(*held)
	return h
}

// asksByRoundTrip reports whether the client of req takes an upstream's
// questions as input requests in the answer to its tools/call.
func asksByRoundTrip(req *mcp.CallToolRequest) bool {
	if req.ProtocolVersion() < roundTripVersion {
		return false
	}
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil
}

// forwardHeld forwards an allowed call whose client answers questions by
// calling again: the upstream call runs detached from this request, and this
// request ends with the upstream's result or with its first question. done
// is called when the upstream call ended.
func (g *Gateway) forwardHeld(ctx context.Context, l *link, up *mcp.ClientSession, req *mcp.CallToolRequest,
	key string, args json.RawMessage, res client.Result, done func()) (mcp.Result, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		done()
		return nil, err
	}
	h := &held{state: "countersign-" + hex.EncodeToString(nonce[:]), name: req.Params.Name, key: key,
		caps: req.ClientCapabilities().Elicitation, events: make(chan heldEvent, 1), busy: true}
	hctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), heldKey{}, h))
	h.cancel = cancel
	l.hold(h)
	go func() {
		defer cancel()
		defer done() // the call ran: see callBook.run
		out, err := g.forward(hctx, l, up, req, args, res)
		select {
		case h.events <- heldEvent{res: out, err: err}:
		default:
			// A question no one answered fills the channel: the call was
			// let go, and no request waits for its result.
		}
	}()
	return g.await(ctx, l, h)
}

// resume continues a held call with the client's answer to its question.
func (g *Gateway) resume(ctx context.Context, l *link, p *mcp.CallToolParamsRaw, key string) (mcp.Result, error) {
	h := l.heldCall(p.RequestState)
	if h == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"tools/call: requestState %q names no call waiting for an answer here (it ended or expired); call the tool again without inputResponses",
			p.RequestState)}
	}
	if h.name != p.Name || h.key != key {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "tools/call: the tool and arguments must be those of the call the requestState continues"}
	}
	h.mu.Lock()
	if h.busy {
		h.mu.Unlock()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "tools/call: another request is continuing this call already"}
	}
	q := h.asked
	var ans *mcp.ElicitResult
	if q != nil {
		ans, _ = p.InputResponses[q.id].(*mcp.ElicitResult)
		if ans == nil {
			h.mu.Unlock()
			return inputRequired(h.state, q), nil // not answered: asked again
		}
		h.asked = nil
	}
	h.busy = true
	h.mu.Unlock()
	if ans != nil {
		q.answer <- ans
	}
	return g.await(ctx, l, h)
}

// await waits for the held call's next event: a question goes to the client
// as an input request, the result ends the call.
func (g *Gateway) await(ctx context.Context, l *link, h *held) (mcp.Result, error) {
	defer func() {
		h.mu.Lock()
		h.busy = false
		h.mu.Unlock()
	}()
	select {
	case ev := <-h.events:
		if ev.q != nil {
			h.mu.Lock()
			h.asked = ev.q
			h.mu.Unlock()
			return inputRequired(h.state, ev.q), nil
		}
		l.release(h)
		return ev.res, ev.err
	case <-ctx.Done():
		// The client gave up on the call: the upstream call ends with it.
		l.release(h)
		h.cancel()
		return nil, ctx.Err()
	}
}

// ask passes the upstream's question to the client of the held call and
// waits for the answer, up to Config.InputWait; a question not answered in
// time is cancelled and the held call is let go.
func (g *Gateway) ask(ctx context.Context, l *link, h *held, p *mcp.ElicitParams) *mcp.ElicitResult {
	url := p.Mode == "url" || (p.Mode == "" && p.URL != "")
	if url && h.caps.URL == nil || !url && h.caps.Form == nil && h.caps.URL != nil {
		return &mcp.ElicitResult{Action: contracts.AnswerDecline} // a kind of question the client does not take
	}
	h.mu.Lock()
	h.n++
	q := &question{id: fmt.Sprintf("elicitation-%d", h.n), params: p, answer: make(chan *mcp.ElicitResult, 1)}
	h.mu.Unlock()
	timer := time.NewTimer(g.cfg.InputWait)
	defer timer.Stop()
	select {
	case h.events <- heldEvent{q: q}:
	case <-ctx.Done():
		return &mcp.ElicitResult{Action: contracts.AnswerCancel}
	case <-timer.C:
		l.release(h)
		return &mcp.ElicitResult{Action: contracts.AnswerCancel}
	}
	select {
	case ans := <-q.answer:
		return ans
	case <-ctx.Done():
	case <-timer.C:
		g.cfg.Logger.Info("the client did not answer the upstream's question in time; it was cancelled")
	}
	l.release(h)
	return &mcp.ElicitResult{Action: contracts.AnswerCancel}
}

// inputRequiredResult is a tools/call result that asks the client for input: it
// carries resultType "input_required", which the SDK sets only on results
// of the tools it serves itself.
type inputRequiredResult struct{ *mcp.CallToolResult }

func inputRequired(state string, q *question) mcp.Result {
	return inputRequiredResult{&mcp.CallToolResult{InputRequests: mcp.InputRequestMap{q.id: q.params}, RequestState: state}}
}

func (r inputRequiredResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.CallToolResult)
	if err != nil {
		return nil, err
	}
	body := strings.TrimPrefix(string(b), "{")
	if body == "}" {
		return []byte(`{"resultType":"input_required"}`), nil
	}
	return []byte(`{"resultType":"input_required",` + body), nil
}

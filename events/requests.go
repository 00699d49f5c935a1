package events

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
)

// Claims and votes are first asked of the arbiter by NATS request
// (contracts.ClaimSubject, contracts.VoteSubject): it applies the message
// at once and nothing but the record and its announcements is stored.
// When the request is not answered as handled (no arbiter answers such
// requests, the record does not exist yet, a timeout, an error), the same
// message goes to its stream's subject, where HITL_RESOLUTIONS keeps it
// until the arbiter applies it; its id makes the two ways apply it once.
const (
	// requestWait bounds one request.
	requestWait = 2 * time.Second
	// requestPause is how long a path stores its messages at once after a
	// request went unanswered (an arbiter of an earlier release, none
	// running, or a connection without the grant).
	requestPause = time.Minute
)

// RequestPath asks the arbiter to apply messages of one kind by request,
// and remembers whether asking is worth it. The zero value is ready.
type RequestPath struct {
	pausedUntil atomic.Int64 // Unix ns
}

// AppliedRequest is one message to ask the arbiter to apply: its request
// subject, its encoding, and the reply headers that carry a refusal's
// code and message.
type AppliedRequest struct {
	Subject              string
	Data                 []byte
	ErrHeader, MsgHeader string
}

// Ask asks through nc, at time now, for r to be applied. handled reports
// that the arbiter answered it applied it (the record holds it then); not
// handled with a nil error, the caller stores the message instead, and
// why is the reason. err is set only when ctx ended.
func (p *RequestPath) Ask(ctx context.Context, nc *nats.Conn, now time.Time, r AppliedRequest) (handled bool, why, err error) {
	if now.UnixNano() < p.pausedUntil.Load() {
		return false, errors.New("requests paused after one went unanswered"), nil
	}
	why = request(ctx, nc, r)
	if why == nil {
		return true, nil, nil
	}
	if ctx.Err() != nil {
		return false, why, ctx.Err()
	}
	if errors.Is(why, nats.ErrNoResponders) || errors.Is(why, context.DeadlineExceeded) || errors.Is(why, nats.ErrTimeout) {
		p.pausedUntil.Store(now.Add(requestPause).UnixNano())
	}
	return false, why, nil
}

// request sends r once; nil when the answer says it was applied.
func request(ctx context.Context, nc *nats.Conn, r AppliedRequest) error {
	msg := nats.NewMsg(r.Subject)
	msg.Data = r.Data
	if tp := contracts.TraceparentFrom(ctx); tp != "" {
		msg.Header.Set(HeaderTraceparent, contracts.ChildTraceparent(tp))
	}
	rctx, cancel := context.WithTimeout(ctx, requestWait)
	defer cancel()
	reply, err := nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		return err
	}
	if code := reply.Header.Get(r.ErrHeader); code != "" {
		return errors.New(code + ": " + reply.Header.Get(r.MsgHeader))
	}
	return nil
}

package arbiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// QueueClaims and QueueVotes are the queue groups the arbiter's replicas
// answer claim and vote requests in: each request is handled by one of
// them.
const (
	QueueClaims = "arbiter-claims"
	QueueVotes  = "arbiter-votes"
)

// Codes of a claim or vote request's reply that was not handled
// (contracts.HeaderClaimError, contracts.HeaderVoteError). The sender then
// publishes the command on the approval's command subject, or the vote on
// its resolved subject, where HITL_RESOLUTIONS keeps it until it is
// applied.
const (
	// ClaimErrorMalformed: the request is not a claim command (a vote) for
	// the approval its subject names.
	ClaimErrorMalformed = "malformed"
	// ClaimErrorBusy: this replica has as many in hand as it takes.
	ClaimErrorBusy = "busy"
	// ClaimErrorRetry: applying it failed for now (the record could not be
	// read or written, the announcement not published, the record does
	// not exist yet).
	ClaimErrorRetry = "retry"
)

// serveClaims answers claim requests (contracts.ClaimSubject) until ctx
// ends: the same command as on the command subject, applied by the same
// code, without a stored message of its own (see serveRequests).
func (a *Arbiter) serveClaims(ctx context.Context) error {
	return a.serveRequests(ctx, appliedRequests{
		kind: "claim", prefix: contracts.SubjectClaimPrefix, queue: QueueClaims,
		errHeader: contracts.HeaderClaimError, msgHeader: contracts.HeaderClaimErrorMessage,
		handle: a.handleClaim,
	})
}

// serveVotes answers vote requests (contracts.VoteSubject) until ctx ends:
// the same vote as on the resolved subject, applied by the same code,
// without a stored message of its own (see serveRequests).
func (a *Arbiter) serveVotes(ctx context.Context) error {
	return a.serveRequests(ctx, appliedRequests{
		kind: "vote", prefix: contracts.SubjectVotePrefix, queue: QueueVotes,
		errHeader: contracts.HeaderVoteError, msgHeader: contracts.HeaderVoteErrorMessage,
		handle: a.handleVoteRequest,
	})
}

// appliedRequests is one kind of message the arbiter applies at once when
// asked by NATS request.
type appliedRequests struct {
	kind, prefix, queue  string
	errHeader, msgHeader string
	handle               func(context.Context, *nats.Msg) error
}

// serveRequests answers the requests of one kind until ctx ends. Up to
// requestsInHand(Concurrency) requests of the kind are handled at once
// (each mostly waits for its writes); past that a request is answered busy
// at once. It fails never: without the subscription, senders store their
// messages on the stream as before.
func (a *Arbiter) serveRequests(ctx context.Context, k appliedRequests) error {
	nc := a.cfg.JS.Conn()
	slots := make(chan struct{}, requestsInHand(a.cfg.Concurrency))
	sub, err := nc.QueueSubscribe(k.prefix+"*", k.queue, func(m *nats.Msg) {
		if !events.Answerable(m.Reply) {
			// These come by request only, answered on the requester's
			// inbox; an answer anywhere else would be published with the
			// arbiter's rights for whoever chose the subject.
			a.m.unanswerable.WithLabelValues(k.kind).Inc()
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			a.replyRequest(m, k, ClaimErrorBusy, fmt.Errorf("the arbiter has as many %ss in hand as it takes", k.kind))
			return
		}
		go func() {
			defer func() { <-slots }()
			hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err := k.handle(hctx, m)
			code := ClaimErrorRetry
			if events.IsPoison(err) {
				code = ClaimErrorMalformed
			}
			a.replyRequest(m, k, code, err)
		}()
	})
	if err != nil {
		// They still come through the stream: senders that get no
		// answer publish them there.
		a.cfg.Logger.Error(k.kind+" requests are not answered; they take the stream", "err", err)
		<-ctx.Done()
		return nil
	}
	<-ctx.Done()
	// Requests in hand finish with their replies; new ones go to the other
	// replicas, or get no responders and take the stream.
	_ = sub.Drain()
	for range cap(slots) {
		slots <- struct{}{}
	}
	return nil
}

// requestsInHand is how many requests of one kind a replica handles at
// once: a request holds its goroutine while the record, the announcement
// and the audit entry are written (with fsync under load, tens of
// milliseconds), so far more than the consume loops' concurrency, which
// bounds work, not waits.
func requestsInHand(concurrency int) int { return max(256, 8*concurrency) }

// handleClaim applies the claim command m carries.
func (a *Arbiter) handleClaim(ctx context.Context, m *nats.Msg) error {
	return a.handleCommand(ctx, requestMsg{m}, strings.TrimPrefix(m.Subject, contracts.SubjectClaimPrefix), true)
}

// handleVoteRequest applies the vote m carries.
func (a *Arbiter) handleVoteRequest(ctx context.Context, m *nats.Msg) error {
	return a.handleVote(ctx, requestMsg{m}, strings.TrimPrefix(m.Subject, contracts.SubjectVotePrefix))
}

// replyRequest answers a request: empty when it was handled (err is nil;
// the record and the changed event tell how), else code and err's message.
func (a *Arbiter) replyRequest(m *nats.Msg, k appliedRequests, code string, err error) {
	reply := nats.NewMsg(m.Reply)
	if err != nil {
		reply.Header.Set(k.errHeader, code)
		reply.Header.Set(k.msgHeader, err.Error())
	}
	if err := m.RespondMsg(reply); err != nil {
		a.cfg.Logger.Warn(k.kind+" reply not sent", "subject", m.Subject, "err", err)
	}
}

// requestMsg is a claim or vote request seen as the message the command
// and vote code takes: it has no stream metadata, and nothing to
// acknowledge.
type requestMsg struct{ m *nats.Msg }

var errNotStored = errors.New("a request is not a stored message")

func (r requestMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotStored }
func (r requestMsg) Data() []byte                              { return r.m.Data }
func (r requestMsg) Headers() nats.Header                      { return r.m.Header }
func (r requestMsg) Subject() string                           { return r.m.Subject }
func (r requestMsg) Reply() string                             { return r.m.Reply }
func (r requestMsg) Ack() error                                { return nil }
func (r requestMsg) DoubleAck(context.Context) error           { return nil }
func (r requestMsg) Nak() error                                { return nil }
func (r requestMsg) NakWithDelay(time.Duration) error          { return nil }
func (r requestMsg) InProgress() error                         { return nil }
func (r requestMsg) Term() error                               { return nil }
func (r requestMsg) TermWithReason(string) error               { return nil }

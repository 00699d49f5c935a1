package arbiter

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// QueueClaims is the queue group the arbiter's replicas answer claim
// requests in: each request is handled by one of them.
const QueueClaims = "arbiter-claims"

// Codes of a claim request's reply that was not handled
// (contracts.HeaderClaimError). The runner then publishes the command on
// the approval's command subject, where HITL_RESOLUTIONS keeps it until it
// is applied.
const (
	// ClaimErrorMalformed: the request is not a claim command for the
	// approval its subject names.
	ClaimErrorMalformed = "malformed"
	// ClaimErrorBusy: this replica has as many claims in hand as it takes.
	ClaimErrorBusy = "busy"
	// ClaimErrorRetry: applying it failed for now (the record could not be
	// read or written, the announcement not published, the record does
	// not exist yet).
	ClaimErrorRetry = "retry"
)

// serveClaims answers claim requests (contracts.ClaimSubject) until ctx
// ends: the same command as on the command subject, applied by the same
// code, without a stored message of its own. Up to Concurrency claims are
// handled at once; past that a request is answered busy at once. It fails
// never: without the subscription, runners publish their claims on the
// command subject.
func (a *Arbiter) serveClaims(ctx context.Context) error {
	nc := a.cfg.JS.Conn()
	slots := make(chan struct{}, a.cfg.Concurrency)
	sub, err := nc.QueueSubscribe(contracts.SubjectClaimPrefix+"*", QueueClaims, func(m *nats.Msg) {
		if m.Reply == "" {
			return // nobody to answer: a claim comes by request only
		}
		select {
		case slots <- struct{}{}:
		default:
			a.replyClaim(m, ClaimErrorBusy, errors.New("the arbiter has as many claims in hand as it takes"))
			return
		}
		go func() {
			defer func() { <-slots }()
			err := a.handleClaim(ctx, m)
			code := ClaimErrorRetry
			if events.IsPoison(err) {
				code = ClaimErrorMalformed
			}
			a.replyClaim(m, code, err)
		}()
	})
	if err != nil {
		// Claims still come through the command subject: runners that get
		// no answer publish them there.
		a.cfg.Logger.Error("claim requests are not answered; claims take the command subject", "err", err)
		<-ctx.Done()
		return nil
	}
	<-ctx.Done()
	// Requests in hand finish with their replies; new ones go to the other
	// replicas, or get no responders and take the command subject.
	_ = sub.Drain()
	for range cap(slots) {
		slots <- struct{}{}
	}
	return nil
}

// handleClaim applies the claim command m carries.
func (a *Arbiter) handleClaim(ctx context.Context, m *nats.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.handleCommand(ctx, claimRequest{m}, strings.TrimPrefix(m.Subject, contracts.SubjectClaimPrefix), true)
}

// replyClaim answers a claim request: empty when it was handled (err is
// nil; the record and the changed event tell how), else code and err's
// message.
func (a *Arbiter) replyClaim(m *nats.Msg, code string, err error) {
	reply := nats.NewMsg(m.Reply)
	if err != nil {
		reply.Header.Set(contracts.HeaderClaimError, code)
		reply.Header.Set(contracts.HeaderClaimErrorMessage, err.Error())
	}
	if err := m.RespondMsg(reply); err != nil {
		a.cfg.Logger.Warn("claim reply not sent", "subject", m.Subject, "err", err)
	}
}

// claimRequest is a claim request seen as the message the command code
// takes: it has no stream metadata, and nothing to acknowledge.
type claimRequest struct{ m *nats.Msg }

var errNotStored = errors.New("a claim request is not a stored message")

func (r claimRequest) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotStored }
func (r claimRequest) Data() []byte                              { return r.m.Data }
func (r claimRequest) Headers() nats.Header                      { return r.m.Header }
func (r claimRequest) Subject() string                           { return r.m.Subject }
func (r claimRequest) Reply() string                             { return r.m.Reply }
func (r claimRequest) Ack() error                                { return nil }
func (r claimRequest) DoubleAck(context.Context) error           { return nil }
func (r claimRequest) Nak() error                                { return nil }
func (r claimRequest) NakWithDelay(time.Duration) error          { return nil }
func (r claimRequest) InProgress() error                         { return nil }
func (r claimRequest) Term() error                               { return nil }
func (r claimRequest) TermWithReason(string) error               { return nil }

package events

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// Votes are first asked of the arbiter by NATS request
// (contracts.VoteSubject): it applies the vote at once and nothing but the
// record and its announcements is stored. When the request is not answered
// as handled (no arbiter answers vote requests, the record does not exist
// yet, a timeout, an error), the same vote goes to the resolved subject,
// where HITL_RESOLUTIONS keeps it until the arbiter applies it; a vote
// applied both ways counts once, by its vote id.
const (
	// voteRequestWait bounds one vote request.
	voteRequestWait = 2 * time.Second
	// voteRequestPause is how long a sender stores its votes at once
	// after a request went unanswered (an arbiter of an earlier release,
	// or none running).
	voteRequestPause = time.Minute
)

// VoteSender has the arbiter apply votes, by request or else stored (see
// above). The zero value is ready; one sender serves a process's votes.
type VoteSender struct {
	pausedUntil atomic.Int64 // Unix ns
}

// Send has the arbiter apply v through js: it returns once the arbiter
// answered it handled the vote, or once the vote is stored. The record
// tells whether the vote counted. asked reports that the arbiter handled
// it by request.
func (s *VoteSender) Send(ctx context.Context, js jetstream.JetStream, v *contracts.Vote) (asked bool, err error) {
	data, err := contracts.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("events: encode vote: %w", err)
	}
	now := time.Now()
	if now.UnixNano() >= s.pausedUntil.Load() {
		err := requestVote(ctx, js.Conn(), v.EventID, data)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			s.pausedUntil.Store(now.Add(voteRequestPause).UnixNano())
		}
	}
	_, err = PublishRaw(ctx, js, contracts.ResolvedSubject(v.EventID), data, v.VoteID, nil)
	return false, err
}

// requestVote asks the arbiter to apply data, an encoded vote on eventID;
// nil when it answered it handled the vote (counted or refused).
func requestVote(ctx context.Context, nc *nats.Conn, eventID string, data []byte) error {
	msg := nats.NewMsg(contracts.VoteSubject(eventID))
	msg.Data = data
	if tp := contracts.TraceparentFrom(ctx); tp != "" {
		msg.Header.Set(HeaderTraceparent, contracts.ChildTraceparent(tp))
	}
	rctx, cancel := context.WithTimeout(ctx, voteRequestWait)
	defer cancel()
	reply, err := nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		return err
	}
	if code := reply.Header.Get(contracts.HeaderVoteError); code != "" {
		return errors.New(code + ": " + reply.Header.Get(contracts.HeaderVoteErrorMessage))
	}
	return nil
}

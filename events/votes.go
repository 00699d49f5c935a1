package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// VoteSender has the arbiter apply votes: by request, or else stored on
// the resolved subject (see RequestPath). The zero value is ready; one
// sender serves a process's votes.
type VoteSender struct {
	path RequestPath
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
	handled, _, err := s.path.Ask(ctx, js.Conn(), time.Now(), AppliedRequest{
		Subject: contracts.VoteSubject(v.EventID), Data: data,
		ErrHeader: contracts.HeaderVoteError, MsgHeader: contracts.HeaderVoteErrorMessage,
	})
	if handled || err != nil {
		return handled, err
	}
	_, err = PublishRaw(ctx, js, contracts.ResolvedSubject(v.EventID), data, v.VoteID, nil)
	return false, err
}

package auditlog

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
)

// Append stores e in the log, de-duplicated by msgID within the stream's
// duplicate window.
func Append(ctx context.Context, js jetstream.JetStream, e *audit.Entry, msgID string) (uint64, error) {
	data, err := e.Encode()
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: e.Subject(), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(audit.Stream))
	if err != nil {
		return 0, fmt.Errorf("audit: append %s of %s: %w", e.Change, e.ID(), err)
	}
	return ack.Sequence, nil
}

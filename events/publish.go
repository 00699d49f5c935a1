package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// HeaderTraceparent carries W3C trace context on every message.
const HeaderTraceparent = contracts.HeaderTraceparent

// Publish marshals v to JSON (contracts.Marshal: no HTML escaping, so a
// message is no larger than the size budget counts) and publishes it on subject with msgID as
// Nats-Msg-Id, so a retried publish inside the stream's duplicate window is
// stored once. It returns the stream acknowledgement; ack.Duplicate tells a
// re-publish apart.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, v any, msgID string, hdr nats.Header) (*jetstream.PubAck, error) {
	data, err := contracts.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("events: encode message for %s: %w", subject, err)
	}
	return PublishRaw(ctx, js, subject, data, msgID, hdr)
}

// PublishRaw publishes data as is; see Publish. A message without a
// traceparent header gets a new span of the trace ctx carries, if any.
func PublishRaw(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string, hdr nats.Header) (*jetstream.PubAck, error) {
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for k, vs := range hdr {
		msg.Header[k] = vs
	}
	if msg.Header.Get(HeaderTraceparent) == "" {
		if tp := contracts.TraceparentFrom(ctx); tp != "" {
			msg.Header.Set(HeaderTraceparent, contracts.ChildTraceparent(tp))
		}
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return nil, fmt.Errorf("events: publish %s: %w", subject, err)
	}
	return ack, nil
}

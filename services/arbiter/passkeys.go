package arbiter

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/events"
)

// passkeysOf reads, at the moment a vote is counted, the voter's enrolled
// passkeys and the relying party they are bound to. A vote without an
// assertion needs neither (it is counted, or refused as step_up_required).
// A person with no passkeys, or a server where none was ever enrolled, is
// answered with nil values: the vote is refused, not retried.
func (a *Arbiter) passkeysOf(ctx context.Context, v *contracts.Vote) (*contracts.Passkeys, *contracts.PasskeyParty, error) {
	if v.Passkey == nil {
		return nil, nil, nil
	}
	kv, err := a.passkeysBucket(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	// A value the NATS server stored on a key as its answer to someone's
	// request is not read for the person's passkeys or the party: the
	// newest the API wrote is (events.NewestReadable). One the API wrote
	// that this release cannot read counts as none: the vote is refused.
	r, err := events.NewestReadable(ctx, a.cfg.JS, kv, contracts.BucketPasskeys, contracts.PasskeyPartyKey, passkey.OwnedParty)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	party, ok := passkey.PartyOf(r.Value)
	if !ok {
		return nil, nil, nil
	}
	r, err = events.NewestReadable(ctx, a.cfg.JS, kv, contracts.BucketPasskeys, passkey.KeyName(v.Approver.ID), func(data []byte) bool {
		return passkey.Owned(v.Approver.ID, data)
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &party, nil
	}
	if err != nil {
		return nil, nil, err
	}
	keys, ok := passkey.Of(v.Approver.ID, r.Value)
	if !ok {
		return nil, &party, nil
	}
	return &keys, &party, nil
}

// passkeysBucket opens hitl_passkeys once it exists.
func (a *Arbiter) passkeysBucket(ctx context.Context) (jetstream.KeyValue, error) {
	a.passkeysMu.Lock()
	defer a.passkeysMu.Unlock()
	if a.passkeys == nil {
		kv, err := a.cfg.JS.KeyValue(ctx, contracts.BucketPasskeys)
		if err != nil {
			return nil, err
		}
		a.passkeys = kv
	}
	return a.passkeys, nil
}

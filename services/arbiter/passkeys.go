package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
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
	var party contracts.PasskeyParty
	if ok, err := readJSON(ctx, kv, contracts.PasskeyPartyKey, &party); err != nil || !ok {
		return nil, nil, err
	}
	var keys contracts.Passkeys
	ok, err := readJSON(ctx, kv, passkey.KeyName(v.Approver.ID), &keys)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, &party, nil
	}
	return &keys, &party, nil
}

// readJSON reads key of kv into v; false when there is no such key. A
// value that cannot be read is an error for good (dead-lettered by the
// caller's message), never a reason to count a vote.
func readJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any) (bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return false, nil
	}
	return true, nil
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

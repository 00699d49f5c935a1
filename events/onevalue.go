package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
)

// Buckets that earlier releases provisioned keeping the last values of each
// key (the policy's 64, the passkeys' 16, the push subscriptions' 4) keep
// one value a key now, taking a second only as a roll-up (tuneBucket), so
// that nothing the server publishes on a key as the answer to someone's
// request is stored once the key holds the writer's value. Lowering a
// stream's values per subject drops all but the newest, so provisioning
// first keeps what the history held that is still needed:
//
//   - every policy version the live policy key's history holds gets a key
//     of its own (contracts.PolicyVersionKey), unless it has one;
//   - a key whose newest value is not the writer's (such an answer) gets
//     the newest value of the writer's back, when its history holds one.
//
// Nothing is done to a bucket that keeps one value a key already. It is
// idempotent, so several processes may provision at once.
func keepWhatHistoryHolds(ctx context.Context, js jetstream.JetStream, bucket string) error {
	keep := historyKeepers[bucket]
	if keep == nil {
		return nil // kept one value a key in every release
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: %w", bucket, err)
	}
	if st.CachedInfo().Config.MaxMsgsPerSubject <= 1 {
		return nil
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: %w", bucket, err)
	}
	return keep(ctx, history{js: js, kv: kv, bucket: bucket})
}

// historyKeepers are the buckets whose keys earlier releases kept history
// in, and what provisioning keeps of it.
var historyKeepers = map[string]func(context.Context, history) error{
	contracts.BucketPolicy: func(ctx context.Context, h history) error {
		policies, err := h.writersValues(ctx, contracts.PolicyKey, policyDocument)
		if err != nil {
			return err
		}
		for _, e := range policies {
			if err := h.keepPolicyVersion(ctx, e); err != nil {
				return err
			}
		}
		_, err = h.writersValues(ctx, contracts.DirectoryKey, func(_ string, v []byte) bool { return readSpec(v, contracts.SpecDirectory) })
		return err
	},
	contracts.BucketPasskeys: func(ctx context.Context, h history) error {
		return h.everyKey(ctx, func(key string, v []byte) bool {
			if key == contracts.PasskeyPartyKey {
				return passkey.OwnedParty(v)
			}
			return passkey.OwnedByKey(key, v)
		})
	},
	contracts.BucketPush: func(ctx context.Context, h history) error {
		return h.everyKey(ctx, func(key string, v []byte) bool {
			var named struct {
				Person string `json:"person"`
			}
			return json.Unmarshal(v, &named) == nil && contracts.PushKey(named.Person) == key &&
				contracts.Owned(v, contracts.SpecPushDevices, "person", named.Person)
		})
	},
}

// history reads and restores keys of one bucket for keepWhatHistoryHolds.
type history struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	bucket string
}

// readSpec reports whether value is a document of spec with a version.
func readSpec(value []byte, spec string) bool {
	var sv struct {
		Spec    string `json:"spec"`
		Version string `json:"version"`
	}
	return json.Unmarshal(value, &sv) == nil && sv.Spec == spec && sv.Version != ""
}

func policyDocument(_ string, v []byte) bool { return readSpec(v, contracts.SpecPolicyDocument) }

// everyKey restores every key of the bucket whose newest value is not the
// writer's (owned).
func (h history) everyKey(ctx context.Context, owned func(key string, value []byte) bool) error {
	keys, err := h.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: list the keys: %w", h.bucket, err)
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	for _, k := range names {
		if _, err := h.writersValues(ctx, k, owned); err != nil {
			return err
		}
	}
	return nil
}

// writersValues returns the values of key's history that are the
// writer's (owned), oldest first, and when the newest value is not one of
// them, writes the newest one that is back over it.
func (h history) writersValues(ctx context.Context, key string, owned func(key string, value []byte) bool) ([]jetstream.KeyValueEntry, error) {
	all, err := h.kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: provision bucket %s: read the history of %q: %w", h.bucket, key, err)
	}
	var theirs []jetstream.KeyValueEntry
	for _, e := range all {
		if e.Operation() == jetstream.KeyValuePut && owned(key, e.Value()) {
			theirs = append(theirs, e)
		}
	}
	last := all[len(all)-1]
	if len(theirs) == 0 || theirs[len(theirs)-1].Revision() == last.Revision() || last.Operation() != jetstream.KeyValuePut {
		return theirs, nil
	}
	newest := theirs[len(theirs)-1]
	if _, err := UpdateKey(ctx, h.js, h.bucket, key, newest.Value(), last.Revision()); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, fmt.Errorf("events: provision bucket %s: restore %q: %w", h.bucket, key, err)
	}
	return theirs, nil
}

// keepPolicyVersion gives the policy document e holds its version's key,
// unless that key holds the version already.
func (h history) keepPolicyVersion(ctx context.Context, e jetstream.KeyValueEntry) error {
	var doc struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(e.Value(), &doc)
	key := contracts.PolicyVersionKey(doc.Version)
	_, err := h.kv.Create(ctx, key, e.Value())
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("events: provision bucket %s: keep policy version %q: %w", h.bucket, doc.Version, err)
	}
	cur, err := h.kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: read policy version %q: %w", h.bucket, doc.Version, err)
	}
	var stored struct {
		Version string `json:"version"`
	}
	if policyDocument(key, cur.Value()) && json.Unmarshal(cur.Value(), &stored) == nil && stored.Version == doc.Version {
		return nil
	}
	if _, err := UpdateKey(ctx, h.js, h.bucket, key, e.Value(), cur.Revision()); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("events: provision bucket %s: keep policy version %q: %w", h.bucket, doc.Version, err)
	}
	return nil
}

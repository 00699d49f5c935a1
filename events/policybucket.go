package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// keepPolicyHistory prepares a hitl_policy bucket provisioned by an earlier
// release, whose keys kept the last 64 values, for one value a key (see
// PolicyBucketConfig): every policy version found in the live key's history
// gets its own key (contracts.PolicyVersionKey) unless it has one, and a
// live policy or directory whose newest value is not the writer's (an
// answer the server published on the key) gets the newest one that is the
// writer's back. Nothing is done to a bucket that keeps one value a key
// already. It is idempotent, so several processes may provision at once.
func keepPolicyHistory(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, "KV_"+contracts.BucketPolicy)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: %w", contracts.BucketPolicy, err)
	}
	if st.CachedInfo().Config.MaxMsgsPerSubject <= 1 {
		return nil
	}
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: %w", contracts.BucketPolicy, err)
	}
	policies, err := writersValues(ctx, js, kv, contracts.PolicyKey, contracts.SpecPolicyDocument)
	if err != nil {
		return err
	}
	for _, e := range policies {
		if err := keepPolicyVersion(ctx, js, kv, e); err != nil {
			return err
		}
	}
	_, err = writersValues(ctx, js, kv, contracts.DirectoryKey, contracts.SpecDirectory)
	return err
}

// specVersion is what keepPolicyHistory reads of a policy or directory.
type specVersion struct {
	Spec    string `json:"spec"`
	Version string `json:"version"`
}

func readSpecVersion(value []byte, spec string) (specVersion, bool) {
	var sv specVersion
	if json.Unmarshal(value, &sv) != nil || sv.Spec != spec || sv.Version == "" {
		return sv, false
	}
	return sv, true
}

// writersValues returns the values of key's history whose spec is spec,
// oldest first, and when the newest value is not one of them, writes the
// newest one that is back over it.
func writersValues(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key, spec string) ([]jetstream.KeyValueEntry, error) {
	history, err := kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: provision bucket %s: read the history of %q: %w", contracts.BucketPolicy, key, err)
	}
	var theirs []jetstream.KeyValueEntry
	for _, e := range history {
		if _, ok := readSpecVersion(e.Value(), spec); ok && e.Operation() == jetstream.KeyValuePut {
			theirs = append(theirs, e)
		}
	}
	last := history[len(history)-1]
	if len(theirs) == 0 || theirs[len(theirs)-1].Revision() == last.Revision() || last.Operation() != jetstream.KeyValuePut {
		return theirs, nil
	}
	newest := theirs[len(theirs)-1]
	if _, err := UpdateKey(ctx, js, contracts.BucketPolicy, key, newest.Value(), last.Revision()); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, fmt.Errorf("events: provision bucket %s: restore %q: %w", contracts.BucketPolicy, key, err)
	}
	return theirs, nil
}

// keepPolicyVersion gives the policy document e holds its version's key,
// unless that key holds the version already.
func keepPolicyVersion(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, e jetstream.KeyValueEntry) error {
	sv, _ := readSpecVersion(e.Value(), contracts.SpecPolicyDocument)
	key := contracts.PolicyVersionKey(sv.Version)
	_, err := kv.Create(ctx, key, e.Value())
	if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
		if err != nil {
			return fmt.Errorf("events: provision bucket %s: keep policy version %q: %w", contracts.BucketPolicy, sv.Version, err)
		}
		return nil
	}
	cur, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("events: provision bucket %s: read policy version %q: %w", contracts.BucketPolicy, sv.Version, err)
	}
	if stored, ok := readSpecVersion(cur.Value(), contracts.SpecPolicyDocument); ok && stored.Version == sv.Version {
		return nil
	}
	if _, err := UpdateKey(ctx, js, contracts.BucketPolicy, key, e.Value(), cur.Revision()); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("events: provision bucket %s: keep policy version %q: %w", contracts.BucketPolicy, sv.Version, err)
	}
	return nil
}

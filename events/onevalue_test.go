package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
)

// Earlier releases kept the last 16 values of each passkeys key and the
// last 4 of each push subscriptions key, so an answer the server published
// on a key could be its newest value. Provisioning this release's buckets
// puts each key's newest value of the writer's back over such an answer,
// then keeps one value a key and refuses the next answer.
func TestProvisionKeepsEachKeysNewestValueOfAnEarlierReleasesBucket(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	ctx := context.Background()
	value := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	kept := []struct {
		bucket  string
		history int64
		key     string
		value   []byte
	}{
		{contracts.BucketPasskeys, 16, passkey.KeyName("alice"), value(contracts.Passkeys{Spec: contracts.SpecPasskeys, Person: "alice", Credentials: []contracts.Passkey{}})},
		{contracts.BucketPasskeys, 16, contracts.PasskeyPartyKey, value(contracts.PasskeyParty{Spec: contracts.SpecPasskeyParty, RPID: "example.com", Origins: []string{"https://example.com"}})},
		{contracts.BucketPush, 4, contracts.PushKey("alice"), value(contracts.PushDevices{Spec: contracts.SpecPushDevices, Person: "alice", Devices: []contracts.PushDevice{}})},
	}
	for _, b := range []struct {
		bucket  string
		history int64
	}{{contracts.BucketPasskeys, 16}, {contracts.BucketPush, 4}} {
		eventstest.EarlierBucket(t, admin, b.bucket, b.history)
	}
	for _, k := range kept {
		kv, err := admin.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, k.key, k.value); err != nil {
			t.Fatal(err)
		}
		srv.StoreAnswerOn(embedded.RoleOrchestrator, k.bucket, k.key)
	}

	srv.Provision(admin)
	for _, k := range kept {
		st, err := admin.Stream(ctx, "KV_"+k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.MaxMsgsPerSubject != 1 || !c.DiscardNewPerSubject {
			t.Fatalf("%s after provisioning: %d values a key, discard new per subject %v", k.bucket, c.MaxMsgsPerSubject, c.DiscardNewPerSubject)
		}
		kv, err := admin.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		was, err := kv.Get(ctx, k.key)
		if err != nil || !bytes.Equal(was.Value(), k.value) {
			t.Fatalf("%s %s after provisioning: %v, want the writer's value %s", k.bucket, k.key, err, k.value)
		}
		// The next answer is refused: a write over the revision from
		// before it, queued behind it, fails if it was stored.
		srv.AnswerOn(embedded.RoleOrchestrator, "$KV."+k.bucket+"."+k.key)
		if _, err := events.UpdateKey(ctx, admin, k.bucket, k.key, k.value, was.Revision()); err != nil {
			t.Fatalf("%s %s: a write over its revision before the answer: %v", k.bucket, k.key, err)
		}
	}
}

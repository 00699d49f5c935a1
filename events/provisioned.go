package events

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Provisioning leaves a stream alone when it is configured as asked. An
// update of a stream, even to the configuration it has, makes the server
// apply its limits again (it loads the stream's oldest message block, up to
// 8 MB of memory per stream, held until the block's cache expires), and
// `serve` provisions at every start: a start that finds the streams as they
// should be reads each stream's configuration and writes nothing.

// ensureStream creates sc's stream, or updates it when its configuration
// differs from sc.
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	st, err := js.Stream(ctx, sc.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateOrUpdateStream(ctx, sc)
	case err == nil && !sameStreamConfig(st.CachedInfo().Config, sc):
		_, err = js.UpdateStream(ctx, sc)
	}
	if err != nil {
		return fmt.Errorf("events: provision stream %s: %w", sc.Name, err)
	}
	return nil
}

// ensureBucket creates or updates a bucket and tunes its stream
// (tuneBucket), unless its stream already has the configuration both would
// give it.
func ensureBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValueConfig, watchers bool) error {
	want := bucketStreamConfig(kv, watchers)
	st, err := js.Stream(ctx, want.Name)
	if err == nil && sameStreamConfig(st.CachedInfo().Config, want) {
		return nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("events: provision bucket %s: %w", kv.Bucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, kv); err != nil {
		return fmt.Errorf("events: provision bucket %s: %w", kv.Bucket, err)
	}
	return tuneBucket(ctx, js, kv.Bucket, watchers)
}

// bucketStreamConfig is the stream configuration a bucket of kv gets from
// CreateOrUpdateKeyValue (for the settings the contract's buckets use)
// and then tuneBucket.
func bucketStreamConfig(kv jetstream.KeyValueConfig, watchers bool) jetstream.StreamConfig {
	history := int64(max(kv.History, 1))
	dupes := 2 * time.Minute
	if kv.TTL > 0 && kv.TTL < dupes {
		dupes = kv.TTL
	}
	maxConsumers := -1
	if watchers {
		maxConsumers = FleetWatchers
	}
	var compression jetstream.StoreCompression
	if kv.Compression {
		compression = jetstream.S2Compression
	}
	return jetstream.StreamConfig{
		Name: "KV_" + kv.Bucket, Description: kv.Description, Subjects: []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject: history, MaxBytes: -1, MaxAge: kv.TTL, MaxMsgSize: -1, MaxMsgs: -1,
		Storage: kv.Storage, Replicas: max(kv.Replicas, 1), AllowRollup: true, DenyDelete: true,
		Duplicates: dupes, MaxConsumers: maxConsumers, AllowDirect: false, DiscardNewPerSubject: true,
		Discard: jetstream.DiscardNew, Compression: compression, RePublish: kv.RePublish,
	}
}

// sameStreamConfig reports whether a stream configured as cur (as the
// server reports it) needs no update to be configured as want. The
// server's spellings of a default are the same setting: 0 and -1 for the
// limits, and the metadata it adds itself (keys starting with "_nats.").
// A setting this does not know to be the same reads as different, and the
// stream is updated, as it was before.
func sameStreamConfig(cur, want jetstream.StreamConfig) bool {
	norm := func(c jetstream.StreamConfig) jetstream.StreamConfig {
		for _, v := range []*int64{&c.MaxMsgs, &c.MaxBytes, &c.MaxMsgsPerSubject} {
			if *v <= 0 {
				*v = -1
			}
		}
		for _, v := range []*int{&c.MaxConsumers} {
			if *v <= 0 {
				*v = -1
			}
		}
		if c.MaxMsgSize <= 0 {
			c.MaxMsgSize = -1
		}
		if c.Replicas == 0 {
			c.Replicas = 1
		}
		md := maps.Clone(c.Metadata)
		maps.DeleteFunc(md, func(k, _ string) bool { return strings.HasPrefix(k, "_nats.") })
		if len(md) == 0 {
			md = nil
		}
		c.Metadata = md
		if len(c.Subjects) == 0 {
			c.Subjects = nil
		}
		if len(c.Sources) == 0 {
			c.Sources = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(cur), norm(want))
}

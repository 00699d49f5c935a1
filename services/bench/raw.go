package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	rawStream   = "BENCH_RAW"
	rawSubject  = "bench.raw"
	rawBucket   = "bench_raw"
	rawKeys     = 1000
	asyncWindow = 1024
	// rawPayloadBytes is the size of every raw message, as in the
	// published JetStream figures this floor is compared with.
	rawPayloadBytes = 128
	// kvPace is the put rate of the put→watch measurement.
	kvPace = 1000
	// cycleWrites is the number of persisted writes a cycle costs (DESIGN §9).
	cycleWrites = 6
)

// RawReport is the plain JetStream baseline measured on the same server.
type RawReport struct {
	SyncPublishPerSec  float64 `json:"sync_publish_per_sec"`
	SyncPublish        Dist    `json:"sync_publish_latency"`
	AsyncPublishPerSec float64 `json:"async_publish_per_sec"`
	AsyncWindow        int     `json:"async_window"`
	// KVPutWatch is the time from a KV put's call to a watcher on another
	// connection seeing it, at KVPutsPerSec.
	KVPutWatch   Dist    `json:"kv_put_watch_latency"`
	KVPutsPerSec float64 `json:"kv_puts_per_sec"`
	// FloorCyclesPerSec is the async publish rate divided by the six
	// persisted writes of a full cycle.
	FloorCyclesPerSec float64 `json:"floor_cycles_per_sec"`
}

func measureRaw(ctx context.Context, st *stack, d time.Duration, pr *printer) (*RawReport, error) {
	nc, js, err := st.connect(roleRaw)
	if err != nil {
		return nil, err
	}
	_, wjs, err := st.connect(roleRawWatch)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: rawStream, Subjects: []string{rawSubject + ".>"}, Storage: jetstream.FileStorage, Replicas: st.replicas,
	}); err != nil {
		return nil, fmt.Errorf("create %s: %w", rawStream, err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), rawStream) }()
	payload := make([]byte, rawPayloadBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	rep := &RawReport{AsyncWindow: asyncWindow}

	// Sync publish: one publisher waiting for each ack.
	samples := make([]time.Duration, 0, 1<<16)
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if _, err := js.Publish(ctx, rawSubject+".sync", payload); err != nil {
			return rep, fmt.Errorf("sync publish: %w", err)
		}
		samples = append(samples, time.Since(t))
	}
	rep.SyncPublishPerSec = float64(len(samples)) / time.Since(start).Seconds()
	rep.SyncPublish = summarize(samples)
	pr.syncPublish(rep)

	// Async publish: a window of acks in flight, then wait for all of them.
	var asyncErrs atomic.Int64
	ajs, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(asyncWindow),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { asyncErrs.Add(1) }),
	)
	if err != nil {
		return rep, err
	}
	n := 0
	start = time.Now()
	for time.Since(start) < d {
		if _, err := ajs.PublishAsync(rawSubject+".async", payload, jetstream.WithStallWait(30*time.Second)); err != nil {
			return rep, fmt.Errorf("async publish: %w", err)
		}
		n++
	}
	select {
	case <-ajs.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return rep, errors.New("async publish: acks still missing after a minute")
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	rep.AsyncPublishPerSec = float64(n-int(asyncErrs.Load())) / time.Since(start).Seconds()
	rep.FloorCyclesPerSec = rep.AsyncPublishPerSec / cycleWrites
	pr.asyncPublish(rep)

	if err := measureKVPutWatch(ctx, js, wjs, d, rep, st.replicas); err != nil {
		return rep, err
	}
	pr.kvPutWatch(rep)
	return rep, ctx.Err()
}

// measureKVPutWatch puts at kvPace per second (or as fast as sync puts go,
// if slower) and times each put until a watcher on another connection sees it.
func measureKVPutWatch(ctx context.Context, js, wjs jetstream.JetStream, d time.Duration, rep *RawReport, replicas int) error {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: rawBucket, History: 1, Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", rawBucket, err)
	}
	defer func() { _ = js.DeleteKeyValue(context.WithoutCancel(ctx), rawBucket) }()
	wkv, err := wjs.KeyValue(ctx, rawBucket)
	if err != nil {
		return err
	}
	w, err := wkv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch %s: %w", rawBucket, err)
	}
	defer func() { _ = w.Stop() }()

	lat := watchLatencies(w, time.Now(), int(d.Seconds()*kvPace)+16)
	start := time.Now()
	puts, err := putAtPace(ctx, kv, d, lat.base)
	if err != nil {
		return err
	}
	rep.KVPutsPerSec = float64(puts) / time.Since(start).Seconds()
	if err := lat.waitFor(ctx, puts); err != nil {
		return err
	}
	rep.KVPutWatch = lat.summary()
	return nil
}

// putLatencies collects, for each update a watcher sees, the time since
// its put, which the put carries as nanoseconds since base.
type putLatencies struct {
	base     time.Time
	mu       sync.Mutex
	samples  []time.Duration
	received chan struct{} // signalled after each sample
}

// watchLatencies starts collecting latencies from w's updates.
func watchLatencies(w jetstream.KeyWatcher, base time.Time, capacity int) *putLatencies {
	l := &putLatencies{base: base, samples: make([]time.Duration, 0, capacity), received: make(chan struct{}, 1)}
	go func() {
		for e := range w.Updates() {
			if e == nil || len(e.Value()) < 8 {
				continue
			}
			lat := time.Since(base) - time.Duration(binary.BigEndian.Uint64(e.Value()))
			l.mu.Lock()
			l.samples = append(l.samples, lat)
			l.mu.Unlock()
			select {
			case l.received <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

// waitFor waits until puts samples arrived. A watch delivers state: a put
// superseded before the watcher reads it may be skipped, so the wait for
// stragglers is bounded.
func (l *putLatencies) waitFor(ctx context.Context, puts int) error {
	deadline := time.After(5 * time.Second)
	for {
		l.mu.Lock()
		got := len(l.samples)
		l.mu.Unlock()
		if got >= puts {
			return nil
		}
		select {
		case <-l.received:
		case <-deadline:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *putLatencies) summary() Dist {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarize(l.samples)
}

// putAtPace puts the time since base, padded to rawPayloadBytes, over
// rawKeys keys at kvPace per second for d, and returns how many puts it made.
func putAtPace(ctx context.Context, kv jetstream.KeyValue, d time.Duration, base time.Time) (int, error) {
	value := make([]byte, rawPayloadBytes)
	interval := time.Second / kvPace
	puts := 0
	start := time.Now()
	next := start
	for {
		now := time.Now()
		if now.Sub(start) >= d {
			return puts, nil
		}
		if wait := next.Sub(now); wait > 0 {
			time.Sleep(wait)
		}
		binary.BigEndian.PutUint64(value, uint64(time.Since(base)))
		if _, err := kv.Put(ctx, "k"+strconv.Itoa(puts%rawKeys), value); err != nil {
			return puts, fmt.Errorf("kv put: %w", err)
		}
		puts++
		next = next.Add(interval)
		if now := time.Now(); now.Sub(next) > interval {
			next = now // behind: go on at the pace, without a burst to catch up
		}
	}
}

package embedded_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events/embedded"
)

// streamWriters is how many writers put records side by side in
// BenchmarkSyncedWritesByStream: about the arbiter's record writes in flight
// under the cycle benchmark's load.
const streamWriters = 64

// BenchmarkSyncedWritesByStream measures how many key-value writes one
// embedded server stores per second when the same writers spread their
// writes over 1, 2, 4 or 8 buckets (one stream each), with every write
// synced (as serve runs) and with the lazy flush. The records bucket
// takes three writes of every approval cycle; where one stream's rate
// stops growing while several streams' rates add up, the stream, not the
// process or the connection, is what serializes the writes:
//
//	go test -run '^$' -bench SyncedWritesByStream -benchtime 20000x ./events/embedded/
func BenchmarkSyncedWritesByStream(b *testing.B) {
	for _, mode := range []string{"always", "lazy"} {
		for _, streams := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("sync=%s/streams=%d", mode, streams), func(b *testing.B) {
				benchWritesByStream(b, mode == "always", streams)
			})
		}
	}
}

func benchWritesByStream(b *testing.B, syncAlways bool, streams int) {
	srv, err := embedded.Start(embedded.Config{StoreDir: b.TempDir(), NoListen: true, SyncAlways: syncAlways})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, err := srv.Connect(embedded.User{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buckets := make([]jetstream.KeyValue, streams)
	for i := range buckets {
		if buckets[i], err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "part_" + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
	value := make([]byte, 700) // about a decided record's size
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range streamWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv := buckets[w%streams]
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := kv.Put(ctx, "k"+strconv.FormatInt(i, 10), value); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

package orchestrator_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
)

// benchWaits is how many concurrent waits each iteration registers.
const benchWaits = 10_000

func benchHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkWaiterRegister10k registers 10,000 waits on records not decided
// yet and reports the waiter's memory per wait (heap growth after GC) and
// the goroutines it adds per wait, which must be none: a wait is a map entry
// and a callback, not a goroutine or a consumer. One op is 10,000 waits.
func BenchmarkWaiterRegister10k(b *testing.B) {
	srv := eventstest.NewServer(b)
	js := srv.JetStream()
	srv.Provision(js)
	ctx := context.Background()
	w, err := orchestrator.NewWaiter(ctx, srv.JetStreamAs(embedded.RoleOrchestrator), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close() })
	ids := make([]string, benchWaits)
	fn := func(rec *contracts.Record, _ uint64) bool { return rec.Terminal() }
	cancels := make([]func(), 0, benchWaits)
	var bytes, goroutines float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		cancels = cancels[:0]
		heap0, g0 := benchHeap(), runtime.NumGoroutine()
		b.StartTimer()
		for _, id := range ids {
			cancel, err := w.WatchDecided(ctx, id, fn)
			if err != nil {
				b.Fatal(err)
			}
			cancels = append(cancels, cancel)
		}
		b.StopTimer()
		if n := w.Pending(); n != benchWaits {
			b.Fatalf("waiter holds %d waits, want %d", n, benchWaits)
		}
		bytes += float64(benchHeap()) - float64(heap0)
		goroutines += float64(runtime.NumGoroutine() - g0)
		for _, c := range cancels {
			c()
		}
		b.StartTimer()
	}
	b.ReportMetric(bytes/float64(b.N)/benchWaits, "B/wait")
	b.ReportMetric(goroutines/float64(b.N)/benchWaits, "goroutines/wait")
}

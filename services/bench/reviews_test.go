package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/services/bench"
)

// TestReviewsSmoke runs the allowed-call measurement briefly: it checks
// that every figure is produced (each request answered allowed), not how
// good it is.
func TestReviewsSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := bench.Reviews(ctx, bench.ReviewsConfig{Dir: t.TempDir(), Sync: bench.SyncLazy, Duration: 200 * time.Millisecond, Count: 1, Clients: 4})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{
		"allowed/s": rep.Allowed.PerSec[0], "allowed p50": rep.Allowed.P50Ms[0],
		"healthz/s": rep.Health.PerSec[0], "healthz p50": rep.Health.P50Ms[0],
		"publish p50": rep.SyncPublishP50Ms[0], "async publish/s": rep.AsyncPublishPerSec[0],
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
}

package api

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// BenchmarkIndexChange measures what the records index spends applying one
// change of a record it holds (a pending record decided, as most changes
// are), with the index full: 20,000 decided records (the default
// index_recent) and 500 pending.
//
//	go test -run '^$' -bench IndexChange ./services/api/
func BenchmarkIndexChange(b *testing.B) {
	ix := newIndex(nil, nil, DefaultIndexRecent, slog.New(slog.DiscardHandler))
	start := time.Now()
	const pending = 500
	sums := make([]*summary, DefaultIndexRecent+pending)
	ix.mu.Lock()
	for i := range sums {
		status := contracts.StatusApproved
		if i%41 == 0 && i/41 < pending {
			status = contracts.StatusPending
		}
		sums[i] = &summary{eventID: fmt.Sprintf("%08d", i), rev: uint64(i + 1), status: status, createdAt: start.Add(time.Duration(i) * time.Millisecond)}
		ix.putLocked(sums[i].eventID, sums[i].rev, sums[i])
	}
	ix.mu.Unlock()
	rev := uint64(len(sums))
	statuses := []string{contracts.StatusPending, contracts.StatusApproved}
	b.ResetTimer()
	for i := range b.N {
		old := sums[(i*7919)%len(sums)]
		rev++
		next := &summary{eventID: old.eventID, rev: rev, status: statuses[i%2], createdAt: old.createdAt}
		ix.mu.Lock()
		ix.putLocked(next.eventID, next.rev, next)
		ix.mu.Unlock()
		sums[(i*7919)%len(sums)] = next
	}
}

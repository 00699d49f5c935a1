package receipt

import (
	"context"
	"sync"
	"time"
)

// ReplayStore remembers the ids of receipts that were used, so that each
// receipt is accepted once. Use marks id as used until the given time (the
// receipt's expiry, after which Verify refuses it anyway) and returns an
// error wrapping ErrReplayed if it was already used. It must be atomic: of
// two concurrent Use calls with one id, one fails. Tools with several
// replicas, or that restart within a receipt's lifetime, use
// ServerReplayStore (Countersign keeps the uses) or implement it on
// storage they share.
type ReplayStore interface {
	Use(ctx context.Context, id string, until time.Time) error
}

// DefaultReplayStore is the in-memory store Verify uses when Options.Replay
// is nil: receipts are single-use within the process.
var DefaultReplayStore ReplayStore = NewMemoryReplayStore()

// MemoryReplayStore is an in-memory ReplayStore. Ids are forgotten once
// their time has passed.
type MemoryReplayStore struct {
	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time
	next time.Time // when to sweep next
}

// NewMemoryReplayStore returns an empty store.
func NewMemoryReplayStore() *MemoryReplayStore {
	return &MemoryReplayStore{seen: map[string]time.Time{}, now: time.Now}
}

// Use implements ReplayStore.
func (m *MemoryReplayStore) Use(_ context.Context, id string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if now.After(m.next) {
		for k, t := range m.seen {
			if now.After(t) {
				delete(m.seen, k)
			}
		}
		m.next = now.Add(time.Minute)
	}
	if _, used := m.seen[id]; used {
		return wrap(ErrReplayed, "receipt %s was already used", id)
	}
	m.seen[id] = until
	return nil
}

package slack

import (
	"context"
	"sync"
)

// sentCacheSize is how many delivered notifications a Channel remembers.
const sentCacheSize = 10000

// sentCache remembers, by idempotency key, the Ref of what this process
// already delivered, so a redelivered notification is not posted twice.
// Slack has no idempotency key of its own; a notification redelivered to
// another process can still be posted again (the notifier's guarantee is at
// least once). Concurrent calls with one key share one attempt; a failed
// attempt is forgotten so the next one retries.
type sentCache struct {
	mu    sync.Mutex
	max   int
	calls map[string]*sendCall
	order []string // delivered keys, oldest first
}

type sendCall struct {
	done chan struct{}
	ref  string
	err  error
}

func newSentCache(max int) *sentCache {
	return &sentCache{max: max, calls: map[string]*sendCall{}}
}

// do returns the Ref of key's earlier delivery or runs send.
func (s *sentCache) do(ctx context.Context, key string, send func() (string, error)) (string, error) {
	for {
		s.mu.Lock()
		c, ok := s.calls[key]
		if !ok {
			c = &sendCall{done: make(chan struct{})}
			s.calls[key] = c
			s.mu.Unlock()
			c.ref, c.err = send()
			s.finish(key, c)
			return c.ref, c.err
		}
		s.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if c.err == nil {
			return c.ref, nil
		}
		// The attempt this call waited for failed: try again.
	}
}

func (s *sentCache) finish(key string, c *sendCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(c.done)
	if c.err != nil {
		delete(s.calls, key)
		return
	}
	s.order = append(s.order, key)
	if len(s.order) > s.max {
		delete(s.calls, s.order[0])
		s.order = s.order[1:]
	}
}

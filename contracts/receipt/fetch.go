package receipt

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	// URL of the JWKS, e.g. https://countersign.example.com/.well-known/jwks.json.
	URL string
	// Client makes the requests (default: one with a 10 s timeout).
	Client *http.Client
	// TTL is how long a fetched set is used before it is fetched again
	// (default 5 minutes). A removed key stops verifying at most TTL later.
	TTL time.Duration
	// MinRefresh is the least time between two fetches caused by a kid the
	// cached set does not hold (a key added by a rotation; default 10 s).
	MinRefresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Fetcher is a KeySource that fetches a JWKS over HTTP and caches it. It
// fails closed: when the cached set is older than TTL and cannot be fetched
// again, Key returns the fetch error.
type Fetcher struct {
	cfg FetcherConfig

	mu        sync.Mutex
	set       *KeySet
	fetchedAt time.Time
	triedAt   time.Time
}

// NewFetcher returns a Fetcher; it fetches on first use.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if cfg.URL == "" {
		return nil, errors.New("receipt: FetcherConfig.URL is required")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Fetcher{cfg: cfg}, nil
}

// Key implements KeySource.
func (f *Fetcher) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	if f.set == nil || now.Sub(f.fetchedAt) >= f.cfg.TTL {
		if err := f.fetch(ctx, now); err != nil {
			return nil, err
		}
	}
	k, err := f.set.Key(ctx, kid)
	if err == nil || now.Sub(f.triedAt) < f.cfg.MinRefresh {
		return k, err
	}
	// A kid the set does not hold may be a key added since: fetch again.
	if err := f.fetch(ctx, now); err != nil {
		return nil, err
	}
	return f.set.Key(ctx, kid)
}

func (f *Fetcher) fetch(ctx context.Context, now time.Time) error {
	f.triedAt = now
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.cfg.URL, nil)
	if err != nil {
		return fmt.Errorf("receipt: JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("receipt: fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receipt: fetch JWKS %s: HTTP %d", f.cfg.URL, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("receipt: fetch JWKS: %w", err)
	}
	set, err := ParseJWKS(data)
	if err != nil {
		return fmt.Errorf("receipt: fetch JWKS %s: %w", f.cfg.URL, err)
	}
	f.set, f.fetchedAt = set, now
	return nil
}

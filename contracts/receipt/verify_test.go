package receipt_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/receipt"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func approvalClaims(t *testing.T, tool, args string) receipt.Claims {
	t.Helper()
	sha, err := contracts.ArgumentsSHA256([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return receipt.Claims{Agent: "billing-bot", Tool: tool, ArgsSHA256: sha, Basis: receipt.BasisApproval, DecidedBy: []string{"alice"}}
}

func TestReplayedOnceUnderConcurrency(t *testing.T) {
	k := seedKey(t, "a")
	clk := &clock{t: fixtureNow}
	s, err := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"n":1}`
	tok, err := s.Sign(approvalClaims(t, "tool", args))
	if err != nil {
		t.Fatal(err)
	}
	opts := receipt.Options{Keys: receipt.NewKeySet(k), Replay: receipt.NewMemoryReplayStore(), Now: clk.Now}
	var ok, replayed atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := receipt.Verify(context.Background(), tok, "tool", []byte(args), opts)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, receipt.ErrReplayed):
				replayed.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || replayed.Load() != 15 {
		t.Fatalf("%d accepted, %d replayed; want 1 and 15", ok.Load(), replayed.Load())
	}
}

// A receipt that fails another check does not use up its id: the tool
// that was handed the wrong arguments can still run the right ones.
func TestRefusedReceiptIsNotUsedUp(t *testing.T) {
	k := seedKey(t, "a")
	clk := &clock{t: fixtureNow}
	s, _ := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now})
	tok, _ := s.Sign(approvalClaims(t, "tool", `{"n":1}`))
	opts := receipt.Options{Keys: receipt.NewKeySet(k), Replay: receipt.NewMemoryReplayStore(), Now: clk.Now}
	if _, err := receipt.Verify(context.Background(), tok, "tool", []byte(`{"n":2}`), opts); !errors.Is(err, receipt.ErrArgumentsDiffer) {
		t.Fatalf("got %v, want ErrArgumentsDiffer", err)
	}
	if _, err := receipt.Verify(context.Background(), tok, "tool", []byte(`{"n":1}`), opts); err != nil {
		t.Fatal(err)
	}
}

// TestRotationThroughFetcher rotates keys behind a JWKS endpoint: a receipt
// of a key added after the verifier cached the set verifies (an unknown kid
// fetches again), receipts of the old key verify until it is removed, and
// not after the cache's TTL once it is.
func TestRotationThroughFetcher(t *testing.T) {
	old, added := seedKey(t, "old"), seedKey(t, "new")
	var mu sync.Mutex
	published := receipt.NewKeySet(old)
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		writeJWKS(t, w, published)
	}))
	defer srv.Close()
	clk := &clock{t: fixtureNow}
	f, err := receipt.NewFetcher(receipt.FetcherConfig{URL: srv.URL, Client: srv.Client(), Now: clk.Now, TTL: 5 * time.Minute, MinRefresh: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k receipt.PrivateKey) string {
		s, err := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Sign(approvalClaims(t, "tool", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	verify := func(tok string) error {
		_, err := receipt.Verify(context.Background(), tok, "tool", []byte(`{}`), receipt.Options{Keys: f, Replay: receipt.NewMemoryReplayStore(), Now: clk.Now})
		return err
	}
	oldTok := sign(old)
	if err := verify(oldTok); err != nil {
		t.Fatal(err)
	}
	// Rotation, step 1: the new key is added and signs.
	mu.Lock()
	published = receipt.NewKeySet(added, old)
	mu.Unlock()
	clk.Add(11 * time.Second)
	newTok := sign(added)
	if err := verify(newTok); err != nil {
		t.Fatalf("receipt of the added key: %v", err)
	}
	if err := verify(oldTok); err != nil {
		t.Fatalf("receipt of the old key during the rotation: %v", err)
	}
	// Step 2: the old key is removed; once the cache is older than its TTL
	// its receipts no longer verify.
	mu.Lock()
	published = receipt.NewKeySet(added)
	mu.Unlock()
	clk.Add(5 * time.Minute)
	if err := verify(oldTok); !errors.Is(err, receipt.ErrUnknownKey) {
		t.Fatalf("receipt of the removed key: %v, want ErrUnknownKey", err)
	}
	if err := verify(newTok); err != nil {
		t.Fatal(err)
	}
	// Unknown kids do not make the verifier fetch more than once per MinRefresh.
	n := fetches.Load()
	for range 5 {
		_ = verify(oldTok)
	}
	if got := fetches.Load() - n; got > 1 {
		t.Fatalf("%d fetches for unknown kids within MinRefresh", got)
	}
}

func TestFetcherFailsClosed(t *testing.T) {
	k := seedKey(t, "a")
	up := atomic.Bool{}
	up.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		writeJWKS(t, w, receipt.NewKeySet(k))
	}))
	defer srv.Close()
	clk := &clock{t: fixtureNow}
	f, _ := receipt.NewFetcher(receipt.FetcherConfig{URL: srv.URL, Client: srv.Client(), Now: clk.Now})
	if _, err := f.Key(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	up.Store(false)
	clk.Add(6 * time.Minute)
	_, err := f.Key(context.Background(), k.ID)
	if err == nil || receipt.Code(err) != "receipt_unavailable" {
		t.Fatalf("got %v, want an unavailable error", err)
	}
}

func TestSignerConfigIsChecked(t *testing.T) {
	if _, err := receipt.NewSigner(receipt.SignerConfig{}); err == nil {
		t.Fatal("a signer without a key was made")
	}
	if _, err := receipt.NewSigner(receipt.SignerConfig{Key: seedKey(t, "a"), TTL: 2 * time.Hour}); err == nil {
		t.Fatal("a TTL over the maximum was accepted")
	}
	s, _ := receipt.NewSigner(receipt.SignerConfig{Key: seedKey(t, "a")})
	if _, err := s.Sign(receipt.Claims{Tool: "t"}); !errors.Is(err, receipt.ErrMalformed) {
		t.Fatalf("signed incomplete claims: %v", err)
	}
}

func writeJWKS(t *testing.T, w http.ResponseWriter, s *receipt.KeySet) {
	w.Header().Set("Content-Type", "application/json")
	if err := jsonEncode(w, s.JWKS()); err != nil {
		t.Error(err)
	}
}

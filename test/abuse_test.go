package test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
)

// abuseConfig are the budgets of the abuse test's server: small enough
// that a bounded flood reaches every one of them.
const abuseConfig = `budgets:
  read_header_timeout: 5s
  read_timeout: 5s
  idle_timeout: 5s
  max_connections: 160
  max_connections_per_address: 64
  streams_per_principal: 4
  review_rate: 5
  review_burst: 20
  pending_per_agent: 40
tokens:
`

// The flood's counts. Each is fixed, so what the server must hold of it
// does not depend on the speed of the machine: only on the budgets.
const (
	floodReviews     = 300
	floodConcurrency = 16
	floodStreams     = 60
	floodIdle        = 300
)

// rssGrowthBound bounds how much the server's resident memory may grow
// under the flood. Unbounded, one viewer's 19,500 event streams took it
// from 335 MB to over 1.5 GB. Bounded, the flood's accepted work is at
// most pending_per_agent approvals, streams_per_principal streams and
// max_connections_per_address connections, a few megabytes even with the
// race detector's shadow memory; 256 MiB leaves room for the runtime's
// own growth on any machine while catching a budget that does not hold.
const rssGrowthBound = 256 << 20

// One token floods the server with reviews, event streams and idle
// connections, all from one address; meanwhile another approver's vote on
// another request is counted within seconds, the server's memory stays
// bounded, every review the server accepted has its record, and every
// refusal is a 429 with Retry-After and a code.
func TestAbuseByOneTokenLeavesOthersServed(t *testing.T) {
	dir := t.TempDir()
	tokens := map[string]string{}
	var cfg strings.Builder
	cfg.WriteString(abuseConfig)
	for _, tk := range []struct{ name, roles string }{
		{"flood", "[agent, viewer]"}, {"bot", "[agent]"}, {"alice", "[approver]"}, {"root", "[admin]"},
	} {
		tokens[tk.name] = newPerson(tk.name, "").token
		sum := sha256.Sum256([]byte(tokens[tk.name]))
		fmt.Fprintf(&cfg, "  - {name: %s, subject: %s, roles: %s, sha256: %s}\n", tk.name, tk.name, tk.roles, hex.EncodeToString(sum[:]))
	}
	path := filepath.Join(dir, "countersign.yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// With tokens configured serve makes no development token; the file
	// startServe reads holds the admin's, for its helpers.
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "dev-token"), []byte(tokens["root"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dataDir, "--config", path)
	host := strings.TrimPrefix(p.url, "http://")

	// The approver talks from 127.0.0.1. The flood's idle connections come
	// from 127.0.0.2, its reviews from 127.0.0.3 and its streams from
	// 127.0.0.4: each part meets its own budget whatever the others won of
	// their address's connections, so what is refused does not depend on
	// which goroutine the machine ran first.
	floodDialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 10 * time.Second}
	reviewDialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 10 * time.Second}
	streamDialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, Timeout: 10 * time.Second}
	flood := &http.Client{Transport: &http.Transport{DialContext: reviewDialer.DialContext, MaxIdleConnsPerHost: floodConcurrency}, Timeout: 60 * time.Second}
	streamClient := &http.Client{Transport: &http.Transport{DialContext: streamDialer.DialContext, MaxIdleConnsPerHost: floodStreams}}
	alice := &http.Client{Transport: &http.Transport{}, Timeout: 60 * time.Second}
	do := func(c *http.Client, token, method, path string, body any) (*http.Response, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		}
		req, _ := http.NewRequest(method, p.url+path, rd)
		req.Header.Set("Authorization", "Bearer "+tokens[token])
		resp, err := c.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp, data, err
	}
	rss := func() float64 {
		t.Helper()
		_, body, err := do(alice, "root", "GET", "/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "process_resident_memory_bytes "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		t.Fatal("no process_resident_memory_bytes on /metrics")
		return 0
	}
	// refused checks an over-budget answer and counts it by code.
	var refusedMu sync.Mutex
	refusedBy := map[string]int{}
	refused := func(what string, resp *http.Response, data []byte) {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || e.Error.Code == "" {
			t.Errorf("%s: %d Retry-After %q %s, want 429 with Retry-After and a code", what, resp.StatusCode, resp.Header.Get("Retry-After"), data)
			return
		}
		refusedMu.Lock()
		refusedBy[e.Error.Code]++
		refusedMu.Unlock()
	}

	// The other request, made before the flood.
	var legit struct {
		Results []struct {
			Verdict string `json:"verdict"`
			EventID string `json:"event_id"`
		} `json:"results"`
	}
	resp, data, err := do(alice, "bot", "POST", "/v1/reviews", map[string]any{
		"run": map[string]any{"id": "run-legit", "agent": "bot"}, "tool_calls": []map[string]any{{"id": "c1", "name": "abuse.deploy", "arguments": map[string]any{}}}})
	if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(data, &legit) != nil || len(legit.Results) != 1 || legit.Results[0].Verdict != "pending" {
		t.Fatalf("the other request: %v %v %s", resp, err, data)
	}
	before := rss()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup

	// Event streams: at most streams_per_principal stay open.
	var streamsOpen atomic.Int64
	for i := range floodStreams {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/events", nil)
			req.Header.Set("Authorization", "Bearer "+tokens["flood"])
			resp, err := streamClient.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("stream %d: %v (60 streams fit the address's 64 connections)", i, err)
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				streamsOpen.Add(1)
				_, _ = io.Copy(io.Discard, resp.Body) // held until the test ends
				return
			}
			data, _ := io.ReadAll(resp.Body)
			refused(fmt.Sprintf("stream %d", i), resp, data)
		})
	}

	// Idle connections: each sends one request and then nothing.
	var idleRefused, idleClosed atomic.Int64
	for range floodIdle {
		wg.Go(func() {
			c, err := floodDialer.DialContext(ctx, "tcp", host)
			if err != nil {
				return
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				idleClosed.Add(1)
				return
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				idleClosed.Add(1) // closed without an answer: past the answering bound
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				idleRefused.Add(1)
				return
			}
			// Answered: the server must close it once idle. 30 s is far
			// past the 5 s idle_timeout on any machine.
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := br.ReadByte(); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Errorf("an idle connection stayed open 30 s past idle_timeout")
					return
				}
			}
			idleClosed.Add(1)
		})
	}

	// Reviews: each a new request, as fast as 16 clients can send them.
	var accepted sync.Map // event id → true
	var next atomic.Int64
	var reviews sync.WaitGroup
	for range floodConcurrency {
		reviews.Go(func() {
			for {
				i := next.Add(1)
				if i > floodReviews {
					return
				}
				resp, data, err := do(flood, "flood", "POST", "/v1/reviews", map[string]any{
					"run":        map[string]any{"id": fmt.Sprintf("run-flood-%d", i), "agent": "flood"},
					"tool_calls": []map[string]any{{"id": "c1", "name": "abuse.flood", "arguments": map[string]any{"n": i}}}})
				switch {
				case err != nil:
					// Refused at the door over the address's connections.
				case resp.StatusCode == http.StatusOK:
					var ans struct {
						Results []struct {
							EventID string `json:"event_id"`
						} `json:"results"`
					}
					if json.Unmarshal(data, &ans) != nil || len(ans.Results) != 1 || ans.Results[0].EventID == "" {
						t.Errorf("review %d: %s", i, data)
						continue
					}
					accepted.Store(ans.Results[0].EventID, true)
				default:
					refused(fmt.Sprintf("review %d", i), resp, data)
				}
			}
		})
	}

	// While the flood runs, alice's vote on the other request counts.
	voteStart := time.Now()
	resp, data, err = do(alice, "alice", "POST", "/v1/approvals/"+legit.Results[0].EventID+"/votes", map[string]any{"decision": "approve"})
	if err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted) {
		t.Fatalf("alice's vote during the flood: %v %v %s", resp, err, data)
	}
	for {
		var rec struct{ Record contracts.Record }
		if _, data, err := do(alice, "alice", "GET", "/v1/approvals/"+legit.Results[0].EventID+"?wait=5s", nil); err == nil && json.Unmarshal(data, &rec) == nil &&
			rec.Record.Status == contracts.StatusApproved {
			break
		}
		if time.Since(voteStart) > 30*time.Second {
			t.Fatal("alice's vote was not counted within 30 s of the flood")
		}
	}
	t.Logf("alice's vote counted %v into the flood", time.Since(voteStart).Round(time.Millisecond))

	// The reviews end on their own; then the streams are let go.
	reviews.Wait()
	after := rss()
	stop()
	wg.Wait()

	n := 0
	accepted.Range(func(k, _ any) bool {
		n++
		id := k.(string)
		if resp, data, err := do(alice, "root", "GET", "/v1/approvals/"+id, nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("accepted review %s has no record: %v %v %s", id, resp, err, data)
		}
		return true
	})
	t.Logf("flood: %d reviews accepted, refusals by code %v, %d streams open, %d idle connections refused and %d closed; RSS %.0f MB → %.0f MB",
		n, refusedBy, streamsOpen.Load(), idleRefused.Load(), idleClosed.Load(), before/1e6, after/1e6)
	switch {
	case n == 0 || n > 40:
		t.Errorf("%d of the flood's reviews were accepted; want between 1 and pending_per_agent (40)", n)
	case streamsOpen.Load() > 4:
		t.Errorf("%d of the flood's streams were open at once; want at most streams_per_principal (4)", streamsOpen.Load())
	case refusedBy["rate_limited"]+refusedBy["pending_quota"] == 0 || refusedBy["too_many_streams"] == 0:
		t.Errorf("refusals by code %v: want rate_limited or pending_quota, and too_many_streams", refusedBy)
	case idleRefused.Load() == 0:
		t.Errorf("none of %d idle connections from one address was refused (max_connections_per_address 64)", floodIdle)
	case after-before > rssGrowthBound:
		t.Errorf("the server's RSS grew %.0f MB under the flood; the bound is %d MB", (after-before)/1e6, rssGrowthBound>>20)
	}
}

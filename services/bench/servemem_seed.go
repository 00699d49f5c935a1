package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// httpClient is the serve memory mode's client: keep-alive connections
// enough for its workers.
var httpClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// Shape of the decided history written through the API.
const (
	serveBatch   = 100 // tool calls per review (one run each)
	serveWorkers = 4   // reviews in flight
	serveAgents  = 100
)

// seedServe decides cfg.Decided approvals through p's HTTP API: reviews of
// serveBatch calls (each call gated by the built-in policy), a vote that
// approves every pending call of the run, and a claim of each when asked.
func seedServe(ctx context.Context, cfg ServeMemoryConfig, p *serveProc, rep *ServeMemoryReport) error {
	start := time.Now()
	var next, done atomic.Int64
	runs := (cfg.Decided + serveBatch - 1) / serveBatch
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	lastPrint := time.Now()
	for range serveWorkers {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= runs {
					return nil
				}
				n := min(serveBatch, cfg.Decided-i*serveBatch)
				if err := p.decideRun(gctx, i, n, cfg.Claim); err != nil {
					return fmt.Errorf("run %d: %w", i, err)
				}
				d := done.Add(int64(n))
				mu.Lock()
				if time.Since(lastPrint) > 10*time.Second {
					lastPrint = time.Now()
					fmt.Fprintf(cfg.Out, "serve memory: %d of %d decided\n", d, cfg.Decided)
				}
				mu.Unlock()
			}
		})
	}
	err := g.Wait()
	rep.SeedSeconds = time.Since(start).Seconds()
	return err
}

// reviewResults is the part of POST /v1/reviews' answer the seeding reads.
type reviewResults struct {
	Results []struct {
		Verdict string `json:"verdict"`
		EventID string `json:"event_id"`
	} `json:"results"`
}

// decideRun reviews n calls of run i, approves them with one vote of the
// run, and claims each when asked.
func (p *serveProc) decideRun(ctx context.Context, i, n int, claim bool) error {
	run := p.runPrefix + "run-" + strconv.Itoa(i)
	agent := "agent-" + strconv.Itoa(i%serveAgents)
	calls := make([]map[string]any, n)
	for c := range calls {
		calls[c] = map[string]any{"id": "call-" + strconv.Itoa(c), "name": "billing.refund",
			"arguments": map[string]any{"customer": "cus_" + strconv.Itoa(i*serveBatch+c), "amount": 4200, "currency": "eur"}}
	}
	var rev reviewResults
	body := map[string]any{"run": map[string]any{"id": run, "agent": agent, "requested_by": "user-" + strconv.Itoa(i%300)}, "tool_calls": calls}
	if err := p.post(ctx, "/v1/reviews", body, &rev); err != nil {
		return err
	}
	var ids []string
	for _, r := range rev.Results {
		if r.Verdict != "pending" {
			return fmt.Errorf("review: verdict %q, want pending (the built-in policy gates every call)", r.Verdict)
		}
		ids = append(ids, r.EventID)
	}
	vote := map[string]any{"run_id": run, "agent": agent, "vote": map[string]any{"decision": "approve"}}
	for left := len(ids); left > 0; {
		var ans struct {
			Counted  int `json:"counted"`
			InFlight int `json:"in_flight"`
		}
		if err := p.post(ctx, "/v1/votes", vote, &ans); err != nil {
			return err
		}
		if ans.Counted+ans.InFlight == 0 {
			return fmt.Errorf("votes: none counted with %d pending", left)
		}
		left -= ans.Counted + ans.InFlight
	}
	if !claim {
		return nil
	}
	for _, id := range ids {
		if err := p.claim(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// claim claims an approved call, waiting for its decision first when the
// vote was still in flight.
func (p *serveProc) claim(ctx context.Context, id string) error {
	var rec struct {
		Record struct {
			Status string `json:"status"`
		} `json:"record"`
	}
	if err := p.get(ctx, "/v1/approvals/"+id+"?wait=30s", &rec); err != nil {
		return err
	}
	if rec.Record.Status != "approved" {
		return fmt.Errorf("approval %s is %q, want approved", id, rec.Record.Status)
	}
	return p.post(ctx, "/v1/approvals/"+id+"/claim", map[string]any{"claim_id": "claim-" + id}, nil)
}

func (p *serveProc) post(ctx context.Context, path string, body, into any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", p.base+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return p.do(req, into)
}

func (p *serveProc) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", p.base+path, nil)
	if err != nil {
		return err
	}
	return p.do(req, into)
}

func (p *serveProc) do(req *http.Request, into any) error {
	req.Header.Set("Authorization", "Bearer "+p.token)
	res, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d: %s", req.Method, req.URL.Path, res.StatusCode, body)
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(body, into)
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/inbox"
)

// RecordsConfig says how large a history to seed and how to query it.
type RecordsConfig struct {
	// Dir is the parent of the store (a temporary directory if empty).
	Dir string
	// Sizes are the numbers of stored approvals to measure, each in a
	// store of its own (the smallest serves as the baseline).
	Sizes []int
	// Pending is how many of each size's approvals are pending.
	Pending int
	// Sync is the store: SyncLazy (the default), SyncAlways or SyncCluster
	// (three nodes, R3).
	Sync string
	// Recent is the API's IndexRecent (0: its default).
	Recent int
	// Queries is how many times each listing is timed per restart.
	Queries int
	// Restarts is how many times the API is started on each store;
	// figures are medians over them.
	Restarts int
	// Out receives progress and the table.
	Out io.Writer
	// Profile, when set, receives a CPU profile of the API restarts and
	// listings (not of the seeding).
	Profile io.Writer
}

// RecordsReport is the figures for one history size.
type RecordsReport struct {
	Sync    string `json:"sync"`
	Records int    `json:"records"`
	Pending int    `json:"pending"`
	// SeedSeconds is how long seeding took (records written as the arbiter
	// writes them, asynchronously).
	SeedSeconds float64 `json:"seed_seconds"`
	// StoreBytes is the bucket's size on disk.
	StoreBytes uint64 `json:"store_bytes"`
	// ReadySeconds is api.New until the index has caught up with the
	// bucket: median and range over the restarts.
	ReadySeconds      float64    `json:"ready_seconds"`
	ReadySecondsRange [2]float64 `json:"ready_seconds_range"`
	// HeapBytes is the live heap the API replica holds after the listings:
	// the process's live heap with it running less the heap once it is
	// closed, each after the embedded server's caches have settled
	// (settledHeap); median over the restarts.
	HeapBytes uint64 `json:"heap_bytes"`
	// Indexed is how many records the API's index holds in memory.
	Indexed int `json:"indexed"`
	// Listings are the timed queries, p50 and p99 in milliseconds:
	// medians over the restarts.
	Listings []ListingReport `json:"listings"`
	Error    string          `json:"error,omitempty"`
}

// ListingReport is one timed query.
type ListingReport struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	// Items is the number of items on the (last) page; for the inbox's
	// pages, the page's size in bytes.
	Items int     `json:"items"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// recordAgents, recordApprovers and recordRuns shape the seeded history.
const (
	recordAgents    = 100
	recordApprovers = 50
	recordRuns      = 5000
)

// Records seeds each size of history and measures an API replica on it.
func Records(ctx context.Context, cfg RecordsConfig) ([]RecordsReport, error) {
	if len(cfg.Sizes) == 0 {
		return nil, fmt.Errorf("bench: records needs at least one size")
	}
	cfg.Queries, cfg.Restarts = max(cfg.Queries, 1), max(cfg.Restarts, 1)
	switch cfg.Sync {
	case "":
		cfg.Sync = SyncLazy
	case SyncLazy, SyncAlways, SyncCluster, SyncCluster5:
	default:
		return nil, fmt.Errorf("bench: records: RecordsConfig.Sync must be lazy, always, cluster or cluster5, got %q", cfg.Sync)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	root := cfg.Dir
	if root == "" {
		d, err := os.MkdirTemp("", "countersign-records-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		root = d
	}
	var out []RecordsReport
	for _, n := range cfg.Sizes {
		rep := RecordsReport{Sync: cfg.Sync, Records: n, Pending: min(cfg.Pending, n)}
		if err := measureRecords(ctx, root, cfg, &rep); err != nil {
			rep.Error = err.Error()
			fmt.Fprintf(cfg.Out, "records %d: %v\n", n, err)
		}
		out = append(out, rep)
	}
	printRecords(cfg.Out, out)
	return out, nil
}

func measureRecords(ctx context.Context, root string, cfg RecordsConfig, rep *RecordsReport) error {
	st, err := startStack(ctx, cfg.Sync, root, 0)
	if err != nil {
		return err
	}
	defer st.close()
	_, arbJS, err := st.connect(roleArbiter, jetstream.WithPublishAsyncMaxPending(voteWindow))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := seedRecords(ctx, arbJS, rep.Records, rep.Pending); err != nil {
		return err
	}
	rep.SeedSeconds = time.Since(start).Seconds()
	fmt.Fprintf(cfg.Out, "records %d: seeded in %.1fs\n", rep.Records, rep.SeedSeconds)
	if s, err := arbJS.Stream(ctx, events.RecordStream); err == nil {
		rep.StoreBytes = s.CachedInfo().State.Bytes
	}
	_, apiJS, err := st.connect(roleAPI)
	if err != nil {
		return err
	}
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return measureAPI(ctx, st.gate, apiJS, cfg, rep)
}

// seedRecords writes n records, pending of them pending and the rest
// decided, spread over agents, runs and approvers.
func seedRecords(ctx context.Context, js jetstream.JetStream, n, pending int) error {
	every := n + 1
	if pending > 0 {
		every = n / pending
	}
	created := time.Now().Add(-time.Duration(n) * time.Second)
	for i := range n {
		created = created.Add(time.Second)
		rec := seededRecord(i, created, pending > 0 && i%every == every-1)
		data, err := contracts.Marshal(rec)
		if err != nil {
			return err
		}
		m := &nats.Msg{Subject: events.RecordSubject(rec.Request.EventID), Header: events.RecordHeader(&rec), Data: data}
		for {
			_, err := js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(0))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("seed record %d: %w", i, err)
			}
			select { // the window is full: let the acks catch up
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func seededRecord(i int, created time.Time, pending bool) contracts.Record {
	agent := fmt.Sprintf("agent-%d", i%recordAgents)
	approver := fmt.Sprintf("approver-%d", i%recordApprovers)
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(), Kind: contracts.KindToolApproval,
		Run: contracts.Run{ID: fmt.Sprintf("run-%d", i%recordRuns), Agent: agent, RequestedBy: "user-" + strconv.Itoa(i%300)},
		ToolCall: &contracts.ToolCall{ID: "call-1", Name: "billing.refund",
			Arguments: json.RawMessage(`{"customer":"cus_` + strconv.Itoa(i) + `","amount":4200,"currency":"eur","reason":"duplicate charge"}`)},
		Quorum:    contracts.Quorum{Required: 1, Approvers: []string{approver, "lead"}},
		CreatedAt: created, ExpiresAt: created.Add(time.Hour),
	}
	rec := approval.NewRecord(req, created)
	if pending {
		return rec
	}
	decision := contracts.DecisionApprove
	rec.Status = contracts.StatusApproved
	if i%5 == 0 {
		decision, rec.Status = contracts.DecisionReject, contracts.StatusRejected
	}
	at := created.Add(30 * time.Second)
	rec.Votes = []contracts.Vote{{Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID,
		Decision: decision, Approver: contracts.Approver{ID: approver, Via: "inbox"}}}
	rec.Outcome = &contracts.Outcome{Decision: decision, DecidedBy: []string{approver}, DecidedAt: at}
	rec.UpdatedAt = at
	return rec
}

// benchTokens are the API's tokens in the records bench.
type benchTokens struct{ admin, approver string }

func recordsAPIConfig(gate *orchestrator.Gate, js jetstream.JetStream, recent int, out io.Writer) (api.Config, benchTokens, error) {
	var toks benchTokens
	var list []api.Token
	for _, t := range []struct {
		dst     *string
		subject string
		role    string
	}{{&toks.admin, "root", api.RoleAdmin}, {&toks.approver, "lead", api.RoleApprover}} {
		tok, hash, err := api.NewToken()
		if err != nil {
			return api.Config{}, toks, err
		}
		*t.dst = tok
		list = append(list, api.Token{Name: t.subject, Subject: t.subject, SHA256: hash, Roles: []string{t.role}})
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return api.Config{JS: js, Gate: gate, Tokens: list, Registerer: reg, Gatherer: reg, IndexRecent: recent, Logger: log}, toks, nil
}

// recordQueries are the listings timed: the inbox's and the CLI's common
// questions.
var recordQueries = []struct{ name, query string }{
	{"pending", "status=pending&limit=50"},
	{"by agent", "agent=agent-7&limit=50"},
	{"approver=me", "approver=me&status=pending&limit=50"},
	{"history, rejected of an agent", "status=rejected&agent=agent-40&limit=50"},
	{"history, id prefix", "id_prefix=ab&limit=50"},
	{"history, page 3", "status=approved&limit=50&pages=3"},
	{"approver=me, history", "approver=me&status=rejected&limit=50"},
	// Past what the index holds: the listing reads the bucket's stream.
	// (skip=index: the page after as many items as the index holds).
	{"older history, a page", "limit=50&skip=index"},
	{"by run, into older history", "run_id=run-123&limit=50"},
	{"approver=me, older history", "approver=me&status=approved&limit=50&skip=index"},
}

func measureAPI(ctx context.Context, gate *orchestrator.Gate, js jetstream.JetStream, cfg RecordsConfig, rep *RecordsReport) error {
	var ready []float64
	var heaps []float64
	lat := make([][2][]float64, len(recordQueries)+2)
	items := make([]int, len(recordQueries)+2)
	for r := range cfg.Restarts {
		acfg, toks, err := recordsAPIConfig(gate, js, cfg.Recent, cfg.Out)
		if err != nil {
			return err
		}
		start := time.Now()
		srv, err := api.New(ctx, acfg)
		if err != nil {
			return err
		}
		err = srv.Settle(ctx)
		ready = append(ready, time.Since(start).Seconds())
		rep.Indexed = srv.IndexedRecords()
		if err == nil {
			err = timeListings(ctx, srv, js, toks, cfg.Queries, lat, items)
		}
		with := settledHeap(ctx)
		_ = srv.Close()
		without := settledHeap(ctx)
		heaps = append(heaps, float64(with)-float64(without))
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.Out, "records %d: restart %d ready in %.2fs, heap %.1f MB\n", rep.Records, r+1, ready[r], heaps[r]/1e6)
	}
	rep.ReadySeconds, rep.ReadySecondsRange = median(ready), [2]float64{slices.Min(ready), slices.Max(ready)}
	rep.HeapBytes = uint64(max(median(heaps), 0))
	names := append(recordNames(), "inbox /", "inbox /history")
	for i, name := range names {
		q := ""
		if i < len(recordQueries) {
			q = recordQueries[i].query
		}
		rep.Listings = append(rep.Listings, ListingReport{Name: name, Query: q, Items: items[i], P50Ms: median(lat[i][0]), P99Ms: median(lat[i][1])})
	}
	return nil
}

// settledHeap is the live heap once it has stopped shrinking: the
// embedded server in this process caches the blocks it has read for a
// while, and the API's heap is measured as the difference with and
// without it, each after those caches have let go.
func settledHeap(ctx context.Context) uint64 {
	last := heapAfterGC()
	for range 60 {
		select {
		case <-ctx.Done():
			return last
		case <-time.After(500 * time.Millisecond):
		}
		h := heapAfterGC()
		if h+1<<20 > last && last+1<<20 > h {
			return h
		}
		last = h
	}
	return last
}

// addDist adds the p50 and p99 of samples, in milliseconds, to l.
func addDist(l *[2][]float64, samples []time.Duration) {
	d := summarize(samples)
	l[0], l[1] = append(l[0], d.P50), append(l[1], d.P99)
}

func recordNames() []string {
	var out []string
	for _, q := range recordQueries {
		out = append(out, q.name)
	}
	return out
}

// timeListings times every query n times on srv (over HTTP, as clients
// ask) and adds each query's p50 and p99 of this restart to lat.
func timeListings(ctx context.Context, srv *api.Server, js jetstream.JetStream, toks benchTokens, n int, lat [][2][]float64, items []int) error {
	if _, err := inbox.New(ctx, inbox.Config{API: srv, JS: js}); err != nil {
		return err
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	client := hs.Client()
	for i, q := range recordQueries {
		token := toks.admin
		if strings.Contains(q.query, "approver=me") {
			token = toks.approver
		}
		query, err := skipAhead(ctx, client, hs.URL, token, q.query, srv.IndexedRecords())
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		var ds []time.Duration
		for range n {
			t0 := time.Now()
			got, err := listPages(ctx, client, hs.URL, token, query)
			if err != nil {
				return fmt.Errorf("%s: %w", q.name, err)
			}
			ds = append(ds, time.Since(t0))
			items[i] = got
		}
		addDist(&lat[i], ds)
	}
	return timeInbox(ctx, hs, toks.admin, n, lat[len(recordQueries):], items[len(recordQueries):])
}

// skipAhead turns a query's "skip=index" into the cursor after (at
// least) as many of its items as the index holds, paging 500 at a time,
// untimed.
func skipAhead(ctx context.Context, client *http.Client, base, token, query string, indexed int) (string, error) {
	q, err := url.ParseQuery(query)
	if err != nil || !q.Has("skip") {
		return query, err
	}
	skip := indexed
	q.Del("skip")
	page := url.Values{}
	maps.Copy(page, q)
	page.Set("limit", "500")
	for seen := 0; seen < skip; {
		ans, err := listPage(ctx, client, base, token, page)
		if err != nil {
			return "", err
		}
		seen += len(ans.Items)
		if ans.NextCursor == "" {
			break // a history the index holds all of: time its last page
		}
		page.Set("cursor", ans.NextCursor)
	}
	if c := page.Get("cursor"); c != "" {
		q.Set("cursor", c)
	}
	return q.Encode(), nil
}

// listAnswer is a page of GET /v1/approvals, as the bench reads it.
type listAnswer struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
}

func listPage(ctx context.Context, client *http.Client, base, token string, q url.Values) (*listAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/approvals?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var ans listAnswer
	if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %v", res.StatusCode, err)
	}
	return &ans, nil
}

// listPages asks for a listing, following next_cursor "pages" times when
// the query says so, and returns the items of the last page.
func listPages(ctx context.Context, client *http.Client, base, token, query string) (int, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return 0, err
	}
	pages := 1
	if p := q.Get("pages"); p != "" {
		pages, _ = strconv.Atoi(p)
		q.Del("pages")
	}
	n := 0
	for range pages {
		ans, err := listPage(ctx, client, base, token, q)
		if err != nil {
			return 0, err
		}
		n = len(ans.Items)
		if ans.NextCursor == "" {
			break
		}
		q.Set("cursor", ans.NextCursor)
	}
	return n, nil
}

// loginCSRF finds the sign-in form's CSRF token.
var loginCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// timeInbox signs in to the inbox and times its pending and history pages.
func timeInbox(ctx context.Context, hs *httptest.Server, token string, n int, lat [][2][]float64, items []int) error {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	client := &http.Client{Jar: jar, Transport: hs.Client().Transport}
	// The sign-in form carries a CSRF token, matched to its cookie.
	res, err := client.Get(hs.URL + "/login")
	if err != nil {
		return err
	}
	form, _ := io.ReadAll(res.Body)
	res.Body.Close()
	csrf := ""
	if m := loginCSRF.FindSubmatch(form); m != nil {
		csrf = string(m[1])
	}
	res, err = client.PostForm(hs.URL+"/login", url.Values{"token": {token}, "csrf": {csrf}})
	if err != nil {
		return err
	}
	res.Body.Close()
	for i, path := range []string{"/", "/history"} {
		var ds []time.Duration
		for range n {
			t0 := time.Now()
			req, err := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
			if err != nil {
				return err
			}
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("inbox %s: status %d", path, res.StatusCode)
			}
			ds = append(ds, time.Since(t0))
			items[i] = len(body)
		}
		addDist(&lat[i], ds)
	}
	return nil
}

func printRecords(w io.Writer, reps []RecordsReport) {
	fmt.Fprintln(w, "\nstored approvals: API replica start, memory and listings (medians over restarts)")
	for _, r := range reps {
		if r.Error != "" {
			fmt.Fprintf(w, "%d records: failed: %s\n", r.Records, r.Error)
			continue
		}
		fmt.Fprintf(w, "%d records (%d pending, %s), %.0f MB stored: ready %.2fs [%.2f–%.2f], API heap %.1f MB, %d records in its index\n",
			r.Records, r.Pending, r.Sync, float64(r.StoreBytes)/1e6, r.ReadySeconds, r.ReadySecondsRange[0], r.ReadySecondsRange[1], float64(r.HeapBytes)/1e6, r.Indexed)
		for _, l := range r.Listings {
			fmt.Fprintf(w, "  %-32s p50 %7.2f ms  p99 %7.2f ms  (%d items)\n", l.Name, l.P50Ms, l.P99Ms, l.Items)
		}
	}
}

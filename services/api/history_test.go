package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/services/api"
)

// history seeds records straight into the bucket as the arbiter writes
// them (its NATS user, with the summary headers), or as an earlier
// arbiter did (a plain bucket put, without them).
type history struct {
	t       *testing.T
	w       *events.RecordWriter
	e       *env
	created time.Time
	all     []*contracts.Record
}

func (h *history) add(status, agent, run string, approvers []string, headers bool) *contracts.Record {
	h.t.Helper()
	h.created = h.created.Add(time.Second)
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(), Kind: contracts.KindToolApproval,
		Run:       contracts.Run{ID: run, Agent: agent},
		ToolCall:  &contracts.ToolCall{ID: "c1", Name: "billing.refund", Arguments: []byte(`{"amount":1}`)},
		Quorum:    contracts.Quorum{Approvers: approvers, Required: 1},
		CreatedAt: h.created, ExpiresAt: h.created.Add(time.Hour),
	}
	rec := approval.NewRecord(req, h.created)
	rec.Status = status
	data, err := contracts.Marshal(rec)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx := context.Background()
	if headers {
		_, err = h.w.Create(ctx, req.EventID, data, &rec)
	} else {
		kv, kerr := h.e.srv.JetStreamAs(embedded.RoleArbiter).KeyValue(ctx, contracts.BucketApprovals)
		if kerr != nil {
			h.t.Fatal(kerr)
		}
		_, err = kv.Create(ctx, req.EventID, data)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.all = append(h.all, &rec)
	return &rec
}

// listAll follows next_cursor to the end and returns every event id listed.
func (e *env) listEvery(t *testing.T, token, query string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("%s: no end after 1000 pages", query)
		}
		q := query + "&limit=" + strconv.Itoa(limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.call(t, "GET", "/v1/approvals?"+q, token, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
		var ans struct {
			Items      []recordAnswer `json:"items"`
			NextCursor string         `json:"next_cursor"`
		}
		r.decode(t, &ans)
		for _, it := range ans.Items {
			ids = append(ids, it.Record.Request.EventID)
		}
		if ans.NextCursor == "" {
			return ids
		}
		cursor = ans.NextCursor
	}
}

// The index keeps the pending records and the newest decided ones; a
// listing that goes further reads the rest of the history from the
// bucket. Every query lists each record it selects exactly once, across
// the index and the bucket, on a replica that saw the history written, on
// one started after it, and with records written without the summary
// headers (by an earlier arbiter).
func TestListingsReachHistoryPastTheIndex(t *testing.T) {
	e := setup(t)
	h := &history{t: t, e: e, w: events.NewRecordWriter(e.srv.JetStreamAs(embedded.RoleArbiter)), created: time.Now().Add(-24 * time.Hour)}
	agents := []string{"billing", "deploys", "support"}
	statuses := []string{contracts.StatusApproved, contracts.StatusRejected, contracts.StatusExpired}
	seed := func(n int, offset int) {
		for i := range n {
			k := i + offset
			approvers := []string{"carol"}
			if k%4 == 0 {
				approvers = []string{"alice"}
			}
			status := statuses[k%len(statuses)]
			if k%23 == 0 {
				status = contracts.StatusPending
			}
			h.add(status, agents[k%len(agents)], fmt.Sprintf("run-%d", k%7), approvers, k%31 != 5)
		}
	}
	// A pending record an earlier arbiter wrote, long before the rest.
	h.add(contracts.StatusPending, "billing", "run-0", []string{"alice"}, false)
	seed(150, 0)
	recent := 20
	first := e.replica(t, func(c *api.Config) { c.IndexRecent = recent })
	seed(120, 150) // written while the first replica runs: evicted live
	second := e.replica(t, func(c *api.Config) { c.IndexRecent = recent })

	want := func(keep func(*contracts.Record) bool) []string {
		var ids []string
		for _, r := range h.all {
			if keep(r) {
				ids = append(ids, r.Request.EventID)
			}
		}
		return ids
	}
	cases := []struct {
		name, token, query string
		keep               func(*contracts.Record) bool
	}{
		{"everything", "admin", "", func(*contracts.Record) bool { return true }},
		{"pending", "admin", "status=pending", func(r *contracts.Record) bool { return r.Status == contracts.StatusPending }},
		{"decided", "admin", "status=approved,rejected", func(r *contracts.Record) bool {
			return r.Status == contracts.StatusApproved || r.Status == contracts.StatusRejected
		}},
		{"by agent", "admin", "agent=deploys", func(r *contracts.Record) bool { return r.Request.Run.Agent == "deploys" }},
		{"by run", "admin", "run_id=run-3&status=expired", func(r *contracts.Record) bool {
			return r.Request.Run.ID == "run-3" && r.Status == contracts.StatusExpired
		}},
		{"approver alice", "alice", "", func(r *contracts.Record) bool { return slices.Contains(r.Request.Quorum.Approvers, "alice") }},
		{"approver=me", "alice", "approver=me&status=approved", func(r *contracts.Record) bool {
			return slices.Contains(r.Request.Quorum.Approvers, "alice") && r.Status == contracts.StatusApproved
		}},
	}
	for _, replica := range []string{first, second} {
		e.url = replica
		for _, c := range cases {
			exp := want(c.keep)
			got := e.listEvery(t, c.token, c.query, 17)
			if c.name == "everything" {
				// Pages that end exactly where the index ends.
				got = e.listEvery(t, c.token, c.query, len(want(isPending))+recent)
			}
			if dup := duplicatesOf(got); len(dup) > 0 {
				t.Errorf("%s: listed more than once: %v", c.name, dup)
			}
			slices.Sort(got)
			slices.Sort(exp)
			got = slices.Compact(got)
			if !slices.Equal(got, exp) {
				t.Errorf("%s: listed %d records, want %d (missing %v, extra %v)", c.name, len(got), len(exp), minus(exp, got), minus(got, exp))
			}
		}
	}
}

func isPending(r *contracts.Record) bool { return r.Status == contracts.StatusPending }

func duplicatesOf(ids []string) []string {
	seen, dup := map[string]bool{}, []string(nil)
	for _, id := range ids {
		if seen[id] {
			dup = append(dup, id)
		}
		seen[id] = true
	}
	return dup
}

// minus lists (up to five of) the ids of a that b lacks.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) && len(out) < 5 {
			out = append(out, x)
		}
	}
	return out
}

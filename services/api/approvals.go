package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Listing page sizes.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

var allStatuses = []string{
	contracts.StatusPending, contracts.StatusApproved, contracts.StatusRejected, contracts.StatusResponded,
	contracts.StatusAnswered, contracts.StatusExpired, contracts.StatusCancelled,
}

// getApproval answers GET /v1/approvals/{event_id}[?wait=30s].
func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) {
	id, aerr := eventIDParam(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	wait, aerr := parseWait(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	p := principalFrom(r.Context())
	rec, rev, aerr := s.readableRecord(r.Context(), p, id)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if wait > 0 && !rec.Terminal() {
		last, lastRev, _, err := s.watchRecord(r.Context(), id, wait, func(rec *contracts.Record) bool { return rec.Terminal() })
		if err != nil {
			writeError(w, s.backendError("wait for record", err))
			return
		}
		if last != nil && lastRev >= rev {
			rec, rev = last, lastRev
		}
	}
	s.auditRead(r, p, rec, contracts.ReadRecord)
	writeJSON(w, http.StatusOK, recordAnswer{Record: s.withReceipt(r.Context(), s.shown(rec, p), p, receiptReadWait), Revision: rev})
}

type listAnswer struct {
	Items      []recordAnswer `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// listApprovals answers GET /v1/approvals, newest request first.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "status", "agent", "run_id", "id_prefix", "approver", "limit", "cursor":
		default:
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, k, "unknown query parameter %q", k))
			return
		}
	}
	f := listFilter{reader: principalFrom(r.Context()).Reader()}
	if v := q.Get("status"); v != "" {
		for st := range strings.SplitSeq(v, ",") {
			if !slices.Contains(allStatuses, st) {
				writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "status",
					"unknown status %q (one of %s)", st, strings.Join(allStatuses, ", ")))
				return
			}
			f.statuses = append(f.statuses, st)
		}
	}
	f.agent, f.runID = q.Get("agent"), q.Get("run_id")
	if q.Has("id_prefix") {
		f.idPrefix = q.Get("id_prefix")
		if !contracts.ValidEventID(f.idPrefix) {
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "id_prefix",
				"id_prefix must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'"))
			return
		}
	}
	if v := q.Get("approver"); v == "me" {
		f.approver = principalFrom(r.Context()).Subject
	} else {
		f.approver = v
	}
	limit := DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "limit", "limit must be a positive integer (at most %d)", MaxListLimit))
			return
		}
		limit = min(n, MaxListLimit)
	}
	var after *cursor
	if v := q.Get("cursor"); v != "" {
		c, ok := decodeCursor(v)
		if !ok {
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "cursor", "cursor is not one this API returned"))
			return
		}
		after = &c
	}
	syncCtx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	if err := s.index.catchUp(syncCtx); err != nil {
		s.log.Warn("records index is behind the bucket; listing what it holds", "err", err)
	}
	cancel()
	ids, next, err := s.index.list(r.Context(), f, after, limit)
	if err != nil {
		s.log.Warn("listing older history from the bucket failed", "err", err)
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "older history cannot be read from the message bus now; retry shortly"))
		return
	}
	items, aerr := s.fetchRecords(r.Context(), ids)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	for i := range items {
		items[i].Record = s.shown(items[i].Record, principalFrom(r.Context()))
	}
	ans := listAnswer{Items: items}
	if next != nil {
		ans.NextCursor = next.encode()
	}
	writeJSON(w, http.StatusOK, ans)
}

// fetchRecords reads the records of a page, a few at a time, in order.
// Records that no longer exist are left out (and out of the index).
func (s *Server) fetchRecords(ctx context.Context, ids []string) ([]recordAnswer, *Error) {
	out := make([]recordAnswer, len(ids))
	errs := make([]*Error, len(ids))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, rev, aerr := s.getRecord(ctx, id)
			if aerr != nil {
				errs[i] = aerr
				return
			}
			out[i] = recordAnswer{Record: rec, Revision: rev}
		})
	}
	wg.Wait()
	items := make([]recordAnswer, 0, len(ids))
	for i, a := range out {
		switch {
		case errs[i] == nil:
			items = append(items, a)
		case errs[i].Code == CodeUnknownEvent:
			s.index.forget(ids[i])
		default:
			return nil, errs[i]
		}
	}
	return items, nil
}

package api

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// The history the index does not hold is listed from the bucket's stream,
// newest change first: the headers of a range of record messages are
// read at a time, filtered on what they tell (status, agent, run, event
// id), and only the records that pass are read in full where the reader's
// rights need it. One listing reads a first range of archiveFirstChunk
// headers whatever the time, then, while time is
// left of archiveBudget, ranges sized from the rate it has measured to
// take half of what is left (at most archiveChunk each, archiveMaxScan in
// all); then it answers with what it found and a cursor to go on from.
// Sizing each range to half the time left keeps a page near the budget
// when the machine slows down, and every page moves on. Each range is a
// consumer to create (on a cluster, through the meta leader), so a first
// range large enough for most pages keeps that count low.
const (
	archiveFirstChunk = 2048
	archiveMinChunk   = 256
	archiveChunk      = 8192
	archiveMaxScan    = 1 << 17
	archiveBudget     = 25 * time.Millisecond
)

// archived is one record message of a scanned range.
type archived struct {
	seq uint64
	id  string
	sum events.RecordSummary
	ok  bool // the headers were there and readable
}

// list returns a page of the records f selects: first from the index,
// then, when the index holds no more and decided history was left out of
// it, from the bucket's stream.
func (ix *index) list(ctx context.Context, f listFilter, after *cursor, limit int) ([]string, *cursor, error) {
	ix.mu.Lock()
	top := ix.archiveTop
	ix.mu.Unlock()
	if !f.admitsHistory() {
		top = 0
	}
	var ids []string
	if after == nil || after.below == 0 {
		var next *cursor
		ids, next = ix.page(f, after, limit)
		switch {
		case next != nil:
			return ids, next, nil
		case len(ids) == limit && top > 0:
			return ids, &cursor{below: top + 1}, nil // older history follows
		case len(ids) == limit:
			return ids, nil, nil
		}
	} else {
		top = after.below - 1
	}
	if top == 0 {
		return ids, nil, nil
	}
	more, below, err := ix.archive(ctx, f, top, limit-len(ids))
	if err != nil {
		return nil, nil, err
	}
	ids = append(ids, more...)
	if below == 0 {
		return ids, nil, nil
	}
	return ids, &cursor{below: below}, nil
}

// admitsHistory reports whether f can select a decided record.
func (f *listFilter) admitsHistory() bool {
	return len(f.statuses) == 0 || slices.ContainsFunc(f.statuses, func(s string) bool { return s != contracts.StatusPending })
}

// archive scans record messages from sequence top down for up to need
// records f selects that the index does not hold. below is where the next
// page goes on (messages before it), 0 when the scan reached the start.
func (ix *index) archive(ctx context.Context, f listFilter, top uint64, need int) (ids []string, below uint64, err error) {
	byHeaders := f.reader.Admin && len(f.reader.Tenants) == 0 && f.approver == ""
	budget := archiveBudget
	if ix.pageBudget > 0 {
		budget = ix.pageBudget
	}
	began := time.Now()
	deadline, scanned, chunkSize := began.Add(budget), uint64(0), uint64(archiveFirstChunk)
	for top >= 1 {
		start := top - min(top-1, chunkSize-1)
		chunk, err := ix.scanRange(ctx, start, top)
		if err != nil {
			return nil, 0, err
		}
		// Newest first: what the headers rule out is skipped; what they
		// cannot decide is read in full, a window of records at a time
		// side by side (on a cluster each read is a round trip to the
		// stream's leader).
		var cands []archived
		for i := len(chunk) - 1; i >= 0; i-- {
			if c := chunk[i]; !c.ok || f.matchHeaders(c) {
				cands = append(cands, c)
			}
		}
		stored := map[uint64]bool{}
		for k, c := range cands {
			match := c.ok && byHeaders
			if !match {
				if _, read := stored[c.seq]; !read {
					if err := ix.matchStoredWindow(ctx, f, cands[k:], byHeaders, need-len(ids), stored); err != nil {
						return nil, 0, err
					}
				}
				match = stored[c.seq]
			}
			if match {
				ids = append(ids, c.id)
			}
			if len(ids) == need {
				return ids, c.seq, nil
			}
		}
		scanned += top - start + 1
		top = start - 1
		if top < 1 {
			break
		}
		if chunkSize = nextChunk(scanned, time.Since(began), time.Until(deadline)); chunkSize == 0 {
			return ids, start, nil
		}
	}
	return ids, 0, nil
}

// nextChunk sizes the next range of a listing that has scanned headers in
// took, with left of its budget: the headers it can read in half of left at
// the rate so far, or 0 to stop (too little time left, or archiveMaxScan
// reached).
func nextChunk(scanned uint64, took, left time.Duration) uint64 {
	if scanned >= archiveMaxScan || left <= 0 {
		return 0
	}
	n := uint64(float64(scanned) * float64(left) / 2 / float64(max(took, time.Microsecond)))
	if n < archiveMinChunk {
		return 0
	}
	return min(n, archiveChunk, archiveMaxScan-scanned)
}

// scanRange reads the headers of the record messages in [from, to] and
// returns those of decided records the index does not hold, in order.
func (ix *index) scanRange(ctx context.Context, from, to uint64) ([]archived, error) {
	var chunk []archived
	err := scanRangeHeaders(ctx, ix.js.Conn(), from, to, func(seq uint64, m *nats.Msg) {
		id, ok := strings.CutPrefix(m.Subject, recordSubjectPrefix)
		if !ok || deletion(m.Header) {
			return
		}
		sum, ok := events.ParseRecordHeader(m.Header)
		if ok && sum.Status == contracts.StatusPending {
			return // pending records are all in the index
		}
		chunk = append(chunk, archived{seq: seq, id: id, sum: sum, ok: ok})
	})
	if err != nil {
		return nil, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return slices.DeleteFunc(chunk, func(c archived) bool { return ix.byID[c.id] != nil }), nil
}

// matchHeaders applies the filters the headers can answer.
func (f *listFilter) matchHeaders(c archived) bool {
	switch {
	case len(f.statuses) > 0 && !slices.Contains(f.statuses, c.sum.Status):
		return false
	case f.agent != "" && c.sum.Agent != f.agent:
		return false
	case f.runID != "" && c.sum.RunID != f.runID:
		return false
	case f.idPrefix != "" && !strings.HasPrefix(c.id, f.idPrefix):
		return false
	}
	return true
}

// archiveReadWindow bounds the records one listing reads in full side by
// side, and archiveReadAhead how many more than it still needs it reads at
// once.
const (
	archiveReadWindow = 16
	archiveReadAhead  = 2
)

// matchStoredWindow reads in full, side by side, the next records of cands
// that the headers cannot decide: about archiveReadAhead times the need
// left (at least 4, at most archiveReadWindow), and records in stored
// whether each matches.
func (ix *index) matchStoredWindow(ctx context.Context, f listFilter, cands []archived, byHeaders bool, needLeft int, stored map[uint64]bool) error {
	n := min(max(archiveReadAhead*needLeft, 4), archiveReadWindow)
	var batch []archived
	for _, c := range cands {
		if len(batch) == n {
			break
		}
		if c.ok && byHeaders {
			continue
		}
		batch = append(batch, c)
	}
	matches, errs := make([]bool, len(batch)), make([]error, len(batch))
	var wg sync.WaitGroup
	for i, c := range batch {
		wg.Go(func() { matches[i], errs[i] = ix.matchStored(ctx, f, c) })
	}
	wg.Wait()
	for i, c := range batch {
		if errs[i] != nil {
			return errs[i]
		}
		stored[c.seq] = matches[i]
	}
	return nil
}

// matchStored reads the record at c and applies the whole filter, the
// reader's rights included. A record replaced since is left out: its new
// revision is newer than this scan.
func (ix *index) matchStored(ctx context.Context, f listFilter, c archived) (bool, error) {
	sum, err := ix.summaryAt(ctx, c.seq)
	if sum == nil || err != nil {
		return false, err
	}
	return sum.status != contracts.StatusPending && f.match(sum), nil
}

package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// The records index notes what it holds in a small file (Config.IndexSnapshot)
// when it stops and every snapshotEvery while it runs: the bucket revision
// it had applied up to, and the revision of each record it held. A start
// that finds a note for the same bucket reads those records by revision
// and follows the bucket from the noted revision on, instead of reading the
// headers of every record message: on a long history that read touches
// every block of the records' stream, which the store then caches for a
// while (BENCHMARKS.md, "`serve`'s resident memory"). The note names
// positions only; every record is still read from the bucket, so a stale
// or damaged note costs a full read, never a wrong record.

// snapshotVersion is the note's format.
const snapshotVersion = 1

// snapshotEvery is how often a running index writes its note when it has
// applied changes since the last one.
const snapshotEvery = 5 * time.Minute

// snapshotMaxGap is how many changes past its note a start follows from the
// note; past it, the headers read costs less than reading each change in
// full, and the start reads them instead.
const snapshotMaxGap = 200_000

// indexSnapshot is the note.
type indexSnapshot struct {
	Version int    `json:"version"`
	Stream  string `json:"stream"`
	// Created is when the bucket's stream was created: a bucket made again
	// under the same name is another history.
	Created    time.Time `json:"stream_created"`
	Seq        uint64    `json:"seq"` // every change up to it was applied
	ArchiveTop uint64    `json:"archive_top"`
	LeftOut    time.Time `json:"left_out,omitzero"`
	Pending    []uint64  `json:"pending"` // the revisions of the pending records held
	Decided    []uint64  `json:"decided"` // the revisions of the decided records held, oldest first
}

// snapshotLocked is the note of what the index holds now.
func (ix *index) snapshotLocked(created time.Time) *indexSnapshot {
	sn := &indexSnapshot{Version: snapshotVersion, Stream: ix.stream.CachedInfo().Config.Name, Created: created,
		Seq: ix.seq, ArchiveTop: ix.archiveTop, LeftOut: ix.leftOut}
	for _, s := range ix.byID {
		if s.status == contracts.StatusPending {
			sn.Pending = append(sn.Pending, s.rev)
		} else {
			sn.Decided = append(sn.Decided, s.rev)
		}
	}
	slices.Sort(sn.Pending)
	slices.Sort(sn.Decided)
	return sn
}

// saveSnapshot writes the note, replacing the last one whole (a write to a
// temporary file, then a rename).
func (ix *index) saveSnapshot() error {
	if ix.snapshotPath == "" || ix.stream == nil {
		return nil
	}
	ix.mu.Lock()
	sn := ix.snapshotLocked(ix.stream.CachedInfo().Created)
	ix.mu.Unlock()
	data, err := json.Marshal(sn)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(ix.snapshotPath), ".records-index-*")
	if err != nil {
		return fmt.Errorf("api: write the records index note: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone already once renamed
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), ix.snapshotPath)
	}
	if err != nil {
		return fmt.Errorf("api: write the records index note: %w", err)
	}
	ix.savedSeq.Store(sn.Seq)
	return nil
}

// keepSnapshot writes the note every snapshotEvery while the index has
// applied changes since the last one, until stop is closed.
func (ix *index) keepSnapshot(stop <-chan struct{}) {
	t := time.NewTicker(snapshotEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ix.mu.Lock()
			seq := ix.seq
			ix.mu.Unlock()
			if seq == ix.savedSeq.Load() {
				continue
			}
			if err := ix.saveSnapshot(); err != nil {
				ix.log.Warn("the records index note was not written", "err", err)
			}
		}
	}
}

// readSnapshot reads the note and says why it cannot serve this start
// ("" when it can).
func (ix *index) readSnapshot(info *jetstream.StreamInfo) (*indexSnapshot, string) {
	data, err := os.ReadFile(ix.snapshotPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "none yet"
	}
	if err != nil {
		return nil, err.Error()
	}
	var sn indexSnapshot
	state := info.State
	switch {
	case json.Unmarshal(data, &sn) != nil:
		return nil, "unreadable"
	case sn.Version != snapshotVersion:
		return nil, fmt.Sprintf("format %d, not %d", sn.Version, snapshotVersion)
	case sn.Stream != info.Config.Name || !sn.Created.Equal(info.Created):
		return nil, "written for another bucket"
	case sn.Seq > state.LastSeq:
		return nil, "ahead of the bucket"
	case state.LastSeq-sn.Seq > snapshotMaxGap:
		return nil, fmt.Sprintf("%d changes behind the bucket", state.LastSeq-sn.Seq)
	case len(sn.Decided) > ix.recent:
		return nil, "holds more decided records than index_recent"
	}
	return &sn, ""
}

// loadSnapshot fills the index from its note, when there is one this
// start can use: the records it names are read by revision (a record
// changed since is gone at that revision, and the watch from the note's
// revision on brings its change), and the watch starts after the note.
// ok is false when the start must read every record's headers instead.
func (ix *index) loadSnapshot(ctx context.Context, info *jetstream.StreamInfo) (from uint64, ok bool, err error) {
	if ix.snapshotPath == "" {
		return 0, false, nil
	}
	sn, why := ix.readSnapshot(info)
	if sn == nil {
		ix.log.Info("records index note not used: the index reads every record's headers", "why", why)
		return 0, false, nil
	}
	began := time.Now()
	f := newFetcher(ctx, ix)
	f.budget = -1
	for _, rev := range slices.Concat(sn.Pending, sn.Decided) {
		if rev >= info.State.FirstSeq {
			f.fetch(rev)
		}
	}
	if err := f.wait(); err != nil {
		return 0, false, fmt.Errorf("api: load the records index from its note: %w", err)
	}
	ix.mu.Lock()
	// Read side by side, the decided records joined the eviction queue
	// out of order: oldest revision first, as the watch would have.
	slices.SortFunc(ix.evict, func(a, b held) int { return cmp.Compare(a.rev, b.rev) })
	ix.archiveTop = max(ix.archiveTop, sn.ArchiveTop)
	ix.leftOut = maxTime(ix.leftOut, sn.LeftOut)
	ix.seq = max(ix.seq, sn.Seq)
	ix.mu.Unlock()
	ix.fromNote = true
	ix.log.Info("records index loaded from its note", "records", f.n, "noted_at", sn.Seq,
		"watched_from", sn.Seq+1, "took", time.Since(began).Round(time.Millisecond))
	return sn.Seq + 1, true, nil
}

package api

import (
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
// it had applied up to, the revision of each pending record it held, and
// the oldest revision of the decided ones it held. A start that finds a
// note for the same bucket reads the pending records by revision and
// follows the bucket from the oldest decided one (or the noted revision),
// as a start that read every record's headers would from the newest
// decided records it found, without reading the headers of the history
// before them. The note names positions only; every record is still read
// from the bucket, so a stale or damaged note costs a full read, never a
// wrong record.

// snapshotVersion is the note's format.
const snapshotVersion = 2

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
	// DecidedFrom is the oldest revision of a decided record held (0:
	// none was).
	DecidedFrom uint64 `json:"decided_from,omitempty"`
}

// snapshotLocked is the note of what the index holds now.
func (ix *index) snapshotLocked() *indexSnapshot {
	info := ix.stream.CachedInfo()
	sn := &indexSnapshot{Version: snapshotVersion, Stream: info.Config.Name, Created: info.Created,
		Seq: ix.seq, ArchiveTop: ix.archiveTop, LeftOut: ix.leftOut}
	for _, s := range ix.byID {
		switch {
		case s.status == contracts.StatusPending:
			sn.Pending = append(sn.Pending, s.rev)
		case sn.DecidedFrom == 0 || s.rev < sn.DecidedFrom:
			sn.DecidedFrom = s.rev
		}
	}
	slices.Sort(sn.Pending)
	return sn
}

// saveSnapshot writes the note, replacing the last one whole (a write to a
// temporary file, then a rename).
func (ix *index) saveSnapshot() error {
	if ix.snapshotPath == "" || ix.stream == nil {
		return nil
	}
	ix.mu.Lock()
	sn := ix.snapshotLocked()
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
	}
	return &sn, ""
}

// loadSnapshot fills the index from its note, when there is one this
// start can use: the pending records it names that the watch will not
// bring are read by revision (a record changed since is gone at that
// revision, and the watch brings its change), and the watch starts at the
// oldest decided record it names, or after the note. ok is false when the
// start must read every record's headers instead.
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
	from = sn.Seq + 1
	if sn.DecidedFrom > 0 {
		from = min(from, sn.DecidedFrom)
	}
	f := newFetcher(ctx, ix)
	f.budget = -1
	for _, rev := range sn.Pending {
		if rev >= info.State.FirstSeq && rev < from {
			f.fetch(rev)
		}
	}
	if err := f.wait(); err != nil {
		return 0, false, fmt.Errorf("api: load the records index from its note: %w", err)
	}
	ix.mu.Lock()
	ix.archiveTop = max(ix.archiveTop, sn.ArchiveTop)
	ix.leftOut = maxTime(ix.leftOut, sn.LeftOut)
	ix.seq = max(ix.seq, from-1)
	ix.mu.Unlock()
	ix.log.Info("records index loaded from its note", "read_one_by_one", f.n, "noted_at", sn.Seq,
		"watched_from", from, "took", time.Since(began).Round(time.Millisecond))
	return from, true, nil
}

package orchestrator

import (
	"sync"

	"github.com/countersign/countersign/contracts"
)

// Bounds on the records a waiter keeps decoded: a count, and the bytes of
// their encodings (a record may take up to the server's max payload).
const (
	maxDecodedRecords      = 1024
	maxDecodedRecordsBytes = 16 << 20
)

// decodedRecords keeps the records a waiter decoded last, one revision per
// key, so that each revision is decoded once however many waits read it:
// a claim's wait starts from the revision the review's wait was just
// handed. A revision names one content of a record for good, so a hit is
// always the record as stored.
type decodedRecords struct {
	mu    sync.Mutex
	recs  map[string]decodedRecord
	bytes int // the encoded size of the records kept
}

type decodedRecord struct {
	rev  uint64
	rec  *contracts.Record
	size int
}

// decode returns key's record at rev, decoding value only if that revision
// was not decoded before. The record is shared: waits must not modify it.
func (d *decodedRecords) decode(key string, value []byte, rev uint64) (*contracts.Record, error) {
	d.mu.Lock()
	if e, ok := d.recs[key]; ok && e.rev == rev {
		d.mu.Unlock()
		return e.rec, nil
	}
	d.mu.Unlock()
	rec := new(contracts.Record)
	if err := contracts.DecodeRecord(key, value, rec); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.recs == nil {
		d.recs = map[string]decodedRecord{}
	}
	if e, ok := d.recs[key]; ok && e.rev > rev {
		return rec, nil // a newer revision is kept
	}
	d.remove(key)
	if len(value) > maxDecodedRecordsBytes {
		return rec, nil
	}
	for k := range d.recs {
		if len(d.recs) < maxDecodedRecords && d.bytes+len(value) <= maxDecodedRecordsBytes {
			break
		}
		d.remove(k)
	}
	d.recs[key] = decodedRecord{rev: rev, rec: rec, size: len(value)}
	d.bytes += len(value)
	return rec, nil
}

// remove forgets key's record; called with mu held.
func (d *decodedRecords) remove(key string) {
	if e, ok := d.recs[key]; ok {
		d.bytes -= e.size
		delete(d.recs, key)
	}
}

// len is the number of records kept.
func (d *decodedRecords) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.recs)
}

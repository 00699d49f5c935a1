package orchestrator

import (
	"encoding/json"
	"sync"

	"github.com/countersign/countersign/contracts"
)

// maxDecodedRecords bounds the records a waiter keeps decoded.
const maxDecodedRecords = 1024

// decodedRecords keeps the records a waiter decoded last, one revision per
// key, so that each revision is decoded once however many waits read it:
// a claim's wait starts from the revision the review's wait was just
// handed. A revision names one content of a record for good, so a hit is
// always the record as stored.
type decodedRecords struct {
	mu   sync.Mutex
	recs map[string]decodedRecord
}

type decodedRecord struct {
	rev uint64
	rec *contracts.Record
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
	if err := json.Unmarshal(value, rec); err != nil {
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
	if _, ok := d.recs[key]; !ok && len(d.recs) >= maxDecodedRecords {
		for k := range d.recs {
			delete(d.recs, k)
			break
		}
	}
	d.recs[key] = decodedRecord{rev: rev, rec: rec}
	return rec, nil
}

// len is the number of records kept.
func (d *decodedRecords) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.recs)
}

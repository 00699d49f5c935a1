package arbiter

import (
	"sync"

	"github.com/countersign/countersign/contracts"
)

// maxCachedRecords bounds the records the arbiter keeps decoded: about the
// approvals of a few seconds of full load, each a few kilobytes.
const maxCachedRecords = 4096

// recordCache holds the records this arbiter wrote last, decoded, with the
// revision each was written at, so that the next vote or command on an
// approval neither reads nor decodes its record again. A cached record is
// only a guess at the current one: every write from it is a compare-and-set
// against its revision, and a write that loses (another replica wrote, the
// record expired) drops the entry and reads the bucket.
type recordCache struct {
	mu      sync.Mutex
	records map[string]cachedRecord
}

type cachedRecord struct {
	rev uint64
	rec contracts.Record
}

func newRecordCache() *recordCache {
	return &recordCache{records: map[string]cachedRecord{}}
}

// get returns the record of eventID as this arbiter last wrote it.
func (c *recordCache) get(eventID string) (contracts.Record, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.records[eventID]
	return e.rec, e.rev, ok
}

// put remembers rec as written at rev. When the cache is full, an arbitrary
// entry makes room: a miss costs only a read of the bucket.
func (c *recordCache) put(eventID string, rec contracts.Record, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.records[eventID]; !ok && len(c.records) >= maxCachedRecords {
		for k := range c.records {
			delete(c.records, k)
			break
		}
	}
	c.records[eventID] = cachedRecord{rev: rev, rec: rec}
}

// drop forgets eventID's record.
func (c *recordCache) drop(eventID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.records, eventID)
}

// len is the number of cached records.
func (c *recordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

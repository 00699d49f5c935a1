package arbiter

import (
	"sync"

	"github.com/countersign/countersign/contracts"
)

// Bounds on the records the arbiter keeps decoded: about the approvals of
// a few seconds of full load, and at most this many bytes of encoded
// records (a record may take up to the server's max payload).
const (
	maxCachedRecords      = 4096
	maxCachedRecordsBytes = 64 << 20
)

// recordCache holds the records this arbiter wrote last, decoded, with the
// revision each was written at, so that the next vote or command on an
// approval neither reads nor decodes its record again. A cached record is
// only a guess at the current one: every write from it is a compare-and-set
// against its revision, and a write that loses (another replica wrote, the
// record expired) drops the entry and reads the bucket.
type recordCache struct {
	mu      sync.Mutex
	records map[string]cachedRecord
	bytes   int // the encoded size of the records held
}

type cachedRecord struct {
	rev  uint64
	rec  contracts.Record
	size int
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

// put remembers rec, whose encoding takes size bytes, as written at rev.
// When the cache is full, arbitrary entries make room: a miss costs only a
// read of the bucket.
func (c *recordCache) put(eventID string, rec contracts.Record, rev uint64, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(eventID)
	if size > maxCachedRecordsBytes {
		return
	}
	for k := range c.records {
		if len(c.records) < maxCachedRecords && c.bytes+size <= maxCachedRecordsBytes {
			break
		}
		c.remove(k)
	}
	c.records[eventID] = cachedRecord{rev: rev, rec: rec, size: size}
	c.bytes += size
}

// remove forgets eventID's record; called with mu held.
func (c *recordCache) remove(eventID string) {
	if e, ok := c.records[eventID]; ok {
		c.bytes -= e.size
		delete(c.records, eventID)
	}
}

// drop forgets eventID's record.
func (c *recordCache) drop(eventID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(eventID)
}

// len is the number of cached records.
func (c *recordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

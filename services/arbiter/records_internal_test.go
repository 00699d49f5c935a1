package arbiter

import (
	"strconv"
	"testing"

	"github.com/countersign/countersign/contracts"
)

func TestRecordCacheIsBounded(t *testing.T) {
	c := newRecordCache()
	for i := range maxCachedRecords + 100 {
		c.put("e"+strconv.Itoa(i), contracts.Record{Status: contracts.StatusPending}, uint64(i+1), 100)
	}
	if n := c.len(); n != maxCachedRecords {
		t.Fatalf("%d records cached, want at most %d", n, maxCachedRecords)
	}
	last := "e" + strconv.Itoa(maxCachedRecords+99)
	if _, rev, ok := c.get(last); !ok || rev != maxCachedRecords+100 {
		t.Fatalf("the newest record: cached %v at revision %d", ok, rev)
	}
	c.drop(last)
	if _, _, ok := c.get(last); ok {
		t.Fatal("a dropped record is still cached")
	}
}

func TestRecordCacheBoundsItsBytes(t *testing.T) {
	c := newRecordCache()
	const size = 1 << 20
	for i := range 100 {
		c.put("e"+strconv.Itoa(i), contracts.Record{}, 1, size)
	}
	if c.bytes > maxCachedRecordsBytes || c.len() != maxCachedRecordsBytes/size {
		t.Fatalf("%d records of %d bytes held, %d bytes in all; want at most %d bytes", c.len(), size, c.bytes, maxCachedRecordsBytes)
	}
	c.put("e1", contracts.Record{}, 2, 10) // replaces e1, if held, and its size
	total := 0
	for _, e := range c.records {
		total += e.size
	}
	if total != c.bytes {
		t.Fatalf("bytes %d, want the sum of the sizes %d", c.bytes, total)
	}
	c.put("huge", contracts.Record{}, 1, maxCachedRecordsBytes+1)
	if _, _, ok := c.get("huge"); ok {
		t.Fatal("a record larger than the whole budget was cached")
	}
}

package arbiter

import (
	"strconv"
	"testing"

	"github.com/countersign/countersign/contracts"
)

func TestRecordCacheIsBounded(t *testing.T) {
	c := newRecordCache()
	for i := range maxCachedRecords + 100 {
		c.put("e"+strconv.Itoa(i), contracts.Record{Status: contracts.StatusPending}, uint64(i+1))
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

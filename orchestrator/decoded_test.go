package orchestrator

import (
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// Each revision of a record is decoded once: a second read of the same
// revision is the same record, a new revision is decoded anew, and an older
// one never replaces a newer.
func TestDecodedRecordsOncePerRevision(t *testing.T) {
	var d decodedRecords
	v1 := []byte(`{"status":"pending"}`)
	v2 := []byte(`{"status":"approved"}`)
	a, err := d.decode("e1", v1, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.decode("e1", v1, 1)
	if a != b {
		t.Fatal("the same revision was decoded twice")
	}
	c, _ := d.decode("e1", v2, 2)
	if c == a || c.Status != contracts.StatusApproved {
		t.Fatalf("revision 2: %+v", c)
	}
	if old, _ := d.decode("e1", v1, 1); old.Status != contracts.StatusPending {
		t.Fatalf("revision 1 read late: %+v", old)
	}
	if again, _ := d.decode("e1", v2, 2); again != c {
		t.Fatal("a late read of an older revision replaced the newer one")
	}
	if _, err := d.decode("e2", []byte(`{`), 1); err == nil {
		t.Fatal("an unreadable record decoded")
	}
	for i := range maxDecodedRecords + 10 {
		if _, err := d.decode("k"+strconv.Itoa(i), v1, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.len(); n != maxDecodedRecords {
		t.Fatalf("%d records kept, want %d", n, maxDecodedRecords)
	}
}

// A verdict's arguments are its own: changing them leaves the record,
// which other waits share, as it was.
func TestVerdictArgumentsAreACopy(t *testing.T) {
	args := []byte(`{"amount":1}`)
	rec := &contracts.Record{
		Status:  contracts.StatusApproved,
		Request: contracts.ApprovalRequested{ToolCall: &contracts.ToolCall{Name: "pay", ArgumentsSHA256: "sha"}},
		Outcome: &contracts.Outcome{Arguments: args, ArgumentsSHA256: "sha"},
	}
	v := VerdictFor(rec, "c1", "sha")
	if v.Verdict != VerdictAllowed {
		t.Fatalf("verdict %s", v.Verdict)
	}
	v.Arguments[2] = 'X'
	if string(rec.Outcome.Arguments) != `{"amount":1}` {
		t.Fatalf("the record's arguments changed with the verdict's: %s", rec.Outcome.Arguments)
	}
}

func TestDecodedRecordsBoundTheirBytes(t *testing.T) {
	var d decodedRecords
	big := []byte(`{"status":"pending","summary":"` + strings.Repeat("x", 1<<20) + `"}`)
	for i := range 40 {
		if _, err := d.decode("k"+strconv.Itoa(i), big, 1); err != nil {
			t.Fatal(err)
		}
	}
	if d.bytes > maxDecodedRecordsBytes || d.len() != maxDecodedRecordsBytes/len(big) {
		t.Fatalf("%d records, %d bytes kept; want at most %d bytes", d.len(), d.bytes, maxDecodedRecordsBytes)
	}
}

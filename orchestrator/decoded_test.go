package orchestrator

import (
	"errors"
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
	v1 := recordValue("e1", "pending", "")
	v2 := recordValue("e1", "approved", "")
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
	// e1's record stored under e2 (a copy), and a value that is no record
	// (an answer of the server's API published on the key): neither is e2's.
	for _, v := range [][]byte{v2, []byte(`{"type":"io.nats.jetstream.api.v1.account_info_response","memory":0}`)} {
		if _, err := d.decode("e2", v, 2); !errors.Is(err, contracts.ErrNotThisRecord) {
			t.Fatalf("%s decoded as e2's record: %v", v, err)
		}
	}
	for i := range maxDecodedRecords + 10 {
		if _, err := d.decode("k"+strconv.Itoa(i), recordValue("k"+strconv.Itoa(i), "pending", ""), 1); err != nil {
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
	summary := strings.Repeat("x", 1<<20)
	big := recordValue("k0", "pending", summary)
	for i := range 40 {
		if _, err := d.decode("k"+strconv.Itoa(i), recordValue("k"+strconv.Itoa(i), "pending", summary), 1); err != nil {
			t.Fatal(err)
		}
	}
	if d.bytes > maxDecodedRecordsBytes || d.len() != maxDecodedRecordsBytes/len(big) {
		t.Fatalf("%d records, %d bytes kept; want at most %d bytes", d.len(), d.bytes, maxDecodedRecordsBytes)
	}
}

// recordValue is a stored record of key with status and a summary.
func recordValue(key, status, summary string) []byte {
	return []byte(`{"spec":"` + contracts.SpecRecord + `","request":{"event_id":"` + key + `","summary":"` + summary + `"},"status":"` + status + `"}`)
}

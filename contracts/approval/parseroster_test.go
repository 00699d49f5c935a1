package approval_test

import (
	"testing"

	"github.com/countersign/countersign/contracts/approval"
)

// TestParseRosterRefusesWhatIsNotADirectory: a document that is not JSON
// or has another spec is an error, never an empty roster (which would
// remove every approver); a directory document is indexed.
func TestParseRosterRefusesWhatIsNotADirectory(t *testing.T) {
	for _, bad := range []string{`not json`, `{"spec":"countersign.policy/v1","people":[]}`, `{"people":[{"id":"alice"}]}`} {
		if r, err := approval.ParseRoster([]byte(bad)); err == nil || r != nil {
			t.Errorf("ParseRoster(%s) = %v, %v; want an error", bad, r, err)
		}
	}
	r, err := approval.ParseRoster([]byte(`{"spec":"countersign.directory/v1","version":"1","people":[{"id":"alice","email":"alice@example.com","groups":["finance"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := r.Find("ALICE@example.com"); !ok || p.ID != "alice" {
		t.Errorf("Find(ALICE@example.com) = %+v, %v; want alice", p, ok)
	}
}

package audit_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
)

// batchLog is a log of stored messages where entries 2–4 and 6–7 were
// appended as batches: e1 alone, [e2 e3 e4], a checkpoint of e1–e4,
// e5 alone, [e6 e7] (not signed yet).
func batchLog(t *testing.T, s *receipt.Signer) ([]stored, []audit.Pos) {
	t.Helper()
	entry := func(i int) []byte {
		e := audit.Entry{Change: "vote_counted", EventID: fmt.Sprintf("ev_%02d", i), Revision: uint64(i + 1),
			Status: "pending", By: "alice", Via: "web", At: t0.Add(time.Duration(i) * time.Minute)}
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	var msgs []stored
	var at []audit.Pos
	cp := audit.NewCheckpoint(audit.Genesis, t0)
	add := func(seq uint64, index int, data []byte, sign bool) {
		msgs = append(msgs, stored{seq: seq, index: index, entry: data})
		at = append(at, audit.Pos{Seq: seq, Index: index})
		if sign {
			if err := cp.Append(audit.Pos{Seq: seq, Index: index}, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(1, 0, entry(1), true)
	for i := 2; i <= 4; i++ {
		add(2, i-1, entry(i), true)
	}
	token, err := audit.Sign(s, *cp)
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, stored{seq: 3, checkpoint: token})
	add(4, 0, entry(5), false)
	add(5, 1, entry(6), false)
	add(5, 2, entry(7), false)
	return msgs, at
}

func TestBundleWithBatchesVerifies(t *testing.T) {
	s := signer(t, "k1")
	msgs, _ := batchLog(t, s)
	rep := verify(t, export(t, s, msgs, time.Time{}, time.Time{}), nil)
	wantOnly(t, rep)
	if rep.Entries != 7 || rep.Checkpoints != 1 || rep.Signed != 4 || rep.Unsigned != 3 || rep.HeadSeq != 2 || rep.HeadIndex != 3 {
		t.Fatalf("report %+v: want 7 entries, 4 signed up to 2.3, 3 not signed yet", rep)
	}
}

// batchLine finds the line of the entry at p.
func batchLine(t *testing.T, ls []string, p audit.Pos) int {
	t.Helper()
	for i, l := range ls[1:] {
		var line audit.Line
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Seq == p.Seq && line.Index == p.Index && line.Entry != nil {
			return i + 1
		}
	}
	t.Fatalf("no entry %s", p)
	return 0
}

func TestTamperingWithinABatchIsNamed(t *testing.T) {
	s := signer(t, "k1")
	msgs, _ := batchLog(t, s)
	bundle := export(t, s, msgs, time.Time{}, time.Time{})
	swapEntries := func(ls []string, p, q audit.Pos) {
		i, j := batchLine(t, ls, p), batchLine(t, ls, q)
		var a, b audit.Line
		_ = json.Unmarshal([]byte(ls[i]), &a)
		_ = json.Unmarshal([]byte(ls[j]), &b)
		a.Entry, b.Entry = b.Entry, a.Entry
		ai, _ := json.Marshal(a)
		bj, _ := json.Marshal(b)
		ls[i], ls[j] = string(ai), string(bj)
	}
	t.Run("altered signed", func(t *testing.T) {
		ls := lines(bundle)
		i := batchLine(t, ls, audit.Pos{Seq: 2, Index: 2})
		ls[i] = strings.Replace(ls[i], `"by":"alice"`, `"by":"alicf"`, 1)
		wantOnly(t, verify(t, join(ls), nil), "entry 2.2 (ev_03) altered")
	})
	t.Run("moved within its batch", func(t *testing.T) {
		ls := lines(bundle)
		swapEntries(ls, audit.Pos{Seq: 2, Index: 1}, audit.Pos{Seq: 2, Index: 3})
		wantOnly(t, verify(t, join(ls), nil),
			"entry 2.1 (ev_02) reordered: it holds the entry signed at 2.3 (ev_04)",
			"entry 2.3 (ev_04) reordered: it holds the entry signed at 2.1 (ev_02)")
	})
	t.Run("moved within an unsigned batch", func(t *testing.T) {
		ls := lines(bundle)
		swapEntries(ls, audit.Pos{Seq: 5, Index: 1}, audit.Pos{Seq: 5, Index: 2})
		rep := verify(t, join(ls), nil)
		if rep.OK() || rep.Problems[0].Kind != audit.ProblemAltered || rep.Problems[0].Seq != 5 || rep.Problems[0].Index != 1 {
			t.Fatalf("problems %+v: want entry 5.1 altered (it does not follow the chain)", rep.Problems)
		}
	})
	t.Run("removed from its batch", func(t *testing.T) {
		ls := lines(bundle)
		i := batchLine(t, ls, audit.Pos{Seq: 2, Index: 2})
		ls = append(ls[:i], ls[i+1:]...)
		rep := verify(t, join(ls), nil)
		if rep.OK() || rep.Problems[0].Kind != audit.ProblemRemoved || rep.Problems[0].Index != 2 {
			t.Fatalf("problems %+v: want entry 2.2 removed first", rep.Problems)
		}
	})
}

func TestBatchEncodingDecodes(t *testing.T) {
	a, _ := (&audit.Entry{Change: "created", EventID: "ev_a", At: t0}).Encode()
	b, _ := (&audit.Entry{Change: "decided", EventID: "ev_b", At: t0}).Encode()
	data := audit.EncodeBatch([][]byte{a, b})
	if _, err := audit.LeafHash(data); err != nil {
		t.Fatalf("a batch is not canonical JSON: %v", err)
	}
	got, first, err := audit.Entries(audit.SubjectBatch, data)
	if err != nil || first != 1 || len(got) != 2 || string(got[0]) != string(a) || string(got[1]) != string(b) {
		t.Fatalf("Entries = %d entries from %d, %v; want the two entries from index 1", len(got), first, err)
	}
	if got, first, err := audit.Entries(audit.SubjectEntryPrefix+"ev_a", a); err != nil || first != 0 || len(got) != 1 {
		t.Fatalf("an entry stored alone: %d entries from %d, %v", len(got), first, err)
	}
	for _, bad := range []string{`{"spec":"countersign.audit.batch/v1","entries":[]}`, `{"spec":"other","entries":[{}]}`, `not json`} {
		if _, _, err := audit.Entries(audit.SubjectBatch, []byte(bad)); err == nil {
			t.Errorf("Entries(%s) took it", bad)
		}
	}
	if got, _, err := audit.Entries(audit.SubjectCheckpoint, []byte("x.y.z")); err != nil || got != nil {
		t.Errorf("a checkpoint is no entry: %d, %v", len(got), err)
	}
}

func TestChainHashOfABatchEntry(t *testing.T) {
	// SHA-256(32 zero bytes || 32 bytes of 0x01 || 00 00 00 00 00 00 00 07 || 00 00 00 03)
	var leaf audit.Hash
	for i := range leaf {
		leaf[i] = 1
	}
	const want = "c52285a12d0d0e6775957280660dddf584b4862c5cfae14ff8e540a40dd2898b" // computed independently (Python hashlib)
	if got := audit.Hex(audit.NextAt(audit.Genesis, leaf, audit.Pos{Seq: 7, Index: 3})); got != want {
		t.Fatalf("chain hash %s, want %s", got, want)
	}
	if audit.NextAt(audit.Genesis, leaf, audit.Pos{Seq: 7}) != audit.Next(audit.Genesis, leaf, 7) {
		t.Fatal("an entry stored alone chains as Next")
	}
}

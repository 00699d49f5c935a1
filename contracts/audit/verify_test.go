package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func signer(t *testing.T, kid string) *receipt.Signer {
	t.Helper()
	k, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k.ID = kid
	s, err := receipt.NewSigner(receipt.SignerConfig{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stored is one message of the audit stream.
type stored struct {
	seq        uint64
	index      int
	entry      []byte
	checkpoint string
}

// logOf appends n entries and a checkpoint after every `every` of them,
// as the arbiter does, and returns the stream's messages.
func logOf(t *testing.T, s *receipt.Signer, n, every int) []stored {
	t.Helper()
	var msgs []stored
	seq, head := uint64(0), audit.Genesis
	var cp *audit.Checkpoint
	for i := 1; i <= n; i++ {
		e := audit.Entry{Change: "vote_counted", EventID: fmt.Sprintf("ev_%02d", i), Revision: uint64(i + 1),
			RecordSHA256: strings.Repeat("ab", 32), Status: "pending", By: "alice", Via: "web", At: t0.Add(time.Duration(i) * time.Minute)}
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		seq++
		msgs = append(msgs, stored{seq: seq, entry: data})
		if cp == nil {
			cp = audit.NewCheckpoint(head, t0)
		}
		if err := cp.Append(audit.Pos{Seq: seq}, data); err != nil {
			t.Fatal(err)
		}
		if i%every == 0 {
			token, err := audit.Sign(s, *cp)
			if err != nil {
				t.Fatal(err)
			}
			head, _ = audit.ParseHex(cp.Head)
			cp = nil
			seq++
			msgs = append(msgs, stored{seq: seq, checkpoint: token})
		}
	}
	return msgs
}

func export(t *testing.T, s *receipt.Signer, msgs []stored, since, until time.Time) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := audit.NewWriter(&buf, audit.Header{ExportedAt: t0, Keys: s.Keys().JWKS()})
	if err != nil {
		t.Fatal(err)
	}
	x := audit.NewExporter(w, since, until, msgs[0].seq)
	for _, m := range msgs {
		if m.checkpoint != "" {
			if err := x.Checkpoint(m.checkpoint); err != nil {
				t.Fatal(err)
			}
			continue
		}
		x.Entry(audit.Pos{Seq: m.seq, Index: m.index}, m.entry)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func verify(t *testing.T, bundle []byte, keys receipt.KeySource) *audit.Report {
	t.Helper()
	_, rep, err := audit.Verify(context.Background(), bytes.NewReader(bundle), keys)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// lines splits a bundle into its lines (header first).
func lines(b []byte) []string { return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") }

func join(ls []string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

// entryLine finds the line of the entry at seq.
func entryLine(t *testing.T, ls []string, seq uint64) int {
	t.Helper()
	for i, l := range ls[1:] {
		var line audit.Line
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Seq == seq {
			return i + 1
		}
	}
	t.Fatalf("no entry %d", seq)
	return 0
}

// wantOnly checks that rep holds exactly the problems of kinds, each
// message containing its text.
func wantOnly(t *testing.T, rep *audit.Report, want ...string) {
	t.Helper()
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.Message)
	}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d matching %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d is %q, want it to say %q", i, got[i], w)
		}
	}
}

func TestUntouchedBundleVerifies(t *testing.T) {
	s := signer(t, "k1")
	rep := verify(t, export(t, s, logOf(t, s, 10, 4), time.Time{}, time.Time{}), nil)
	wantOnly(t, rep)
	if rep.Entries != 10 || rep.Checkpoints != 2 || rep.Signed != 8 || rep.Unsigned != 2 || rep.HeadSeq != 9 {
		t.Fatalf("report %+v: want 10 entries, 2 checkpoints, 8 signed, 2 not signed yet, head at 9", rep)
	}
}

func TestAlteredEntryIsNamed(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 8, 4), time.Time{}, time.Time{}))
	i := entryLine(t, ls, 3) // the third entry: ev_03
	ls[i] = strings.Replace(ls[i], `"by":"alice"`, `"by":"alicf"`, 1)
	wantOnly(t, verify(t, join(ls), nil), "entry 3 (ev_03) altered")
}

func TestAlteredUnsignedEntryIsNamedByTheChain(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 6, 4), time.Time{}, time.Time{}))
	i := entryLine(t, ls, 7) // ev_06, after the only checkpoint (at seq 5)
	ls[i] = strings.Replace(ls[i], `"pending"`, `"approved"`, 1)
	wantOnly(t, verify(t, join(ls), nil), "entry 7 (ev_06) altered")
}

func TestRemovedEntryIsNamed(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 8, 4), time.Time{}, time.Time{}))
	i := entryLine(t, ls, 2)
	ls = append(ls[:i], ls[i+1:]...)
	wantOnly(t, verify(t, join(ls), nil), "entry 2 (ev_02) removed", "its end line says 8 and 2 were written")
}

func TestCutShortBundleIsRefused(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 8, 4), time.Time{}, time.Time{}))
	// Cut after the first checkpoint: what is left verifies, but the end is missing.
	wantOnly(t, verify(t, join(ls[:6]), nil), "the bundle has no end line: it was cut short")
}

func TestSwappedLinesAreNamed(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 8, 4), time.Time{}, time.Time{}))
	i, j := entryLine(t, ls, 2), entryLine(t, ls, 3)
	ls[i], ls[j] = ls[j], ls[i]
	wantOnly(t, verify(t, join(ls), nil), "entry 2 (ev_02) reordered: it comes after entry 3 (ev_03)")
}

func TestSwappedEntriesAreNamed(t *testing.T) {
	// The entries trade places but keep the sequences of their lines.
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 8, 4), time.Time{}, time.Time{}))
	i, j := entryLine(t, ls, 2), entryLine(t, ls, 3)
	var a, b audit.Line
	_ = json.Unmarshal([]byte(ls[i]), &a)
	_ = json.Unmarshal([]byte(ls[j]), &b)
	a.Entry, b.Entry = b.Entry, a.Entry
	ai, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	ls[i], ls[j] = string(ai), string(bj)
	wantOnly(t, verify(t, join(ls), nil),
		"entry 2 (ev_02) reordered: it holds the entry signed at 3 (ev_03)",
		"entry 3 (ev_03) reordered: it holds the entry signed at 2 (ev_02)")
}

// resign replaces the checkpoint line of ls with c re-signed by s.
func resign(t *testing.T, ls []string, s *receipt.Signer, alter func(*audit.Checkpoint)) []string {
	t.Helper()
	for i, l := range ls {
		var line audit.Line
		_ = json.Unmarshal([]byte(l), &line)
		if line.Checkpoint == "" {
			continue
		}
		c, err := audit.PayloadOf(line.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		alter(c)
		token, err := audit.Sign(s, *c)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(audit.Line{Checkpoint: token})
		ls[i] = string(b)
		return ls
	}
	t.Fatal("no checkpoint")
	return nil
}

func TestCheckpointResignedWithAnotherKeyIsRefused(t *testing.T) {
	s := signer(t, "k1")
	bundle := export(t, s, logOf(t, s, 4, 4), time.Time{}, time.Time{})
	// An entry altered, its checkpoint signed again to match.
	ls := lines(bundle)
	i := entryLine(t, ls, 1)
	ls[i] = strings.Replace(ls[i], `"alice"`, `"mallory"`, 1)
	var altered audit.Line
	_ = json.Unmarshal([]byte(ls[i]), &altered)
	fix := func(c *audit.Checkpoint) {
		leaf, _ := audit.LeafHash(altered.Entry)
		c.Leaves[0].SHA256 = audit.Hex(leaf)
		head := audit.Genesis
		for _, l := range c.Leaves {
			h, _ := audit.ParseHex(l.SHA256)
			head = audit.Next(head, h, l.Seq)
		}
		c.Head = audit.Hex(head)
	}

	t.Run("unknown key", func(t *testing.T) {
		forged := resign(t, append([]string(nil), ls...), signer(t, "k2"), fix)
		wantOnly(t, verify(t, join(forged), nil), `the checkpoint of entries 1–4 does not verify: signed by a key that is not among the keys: key "k2"`)
	})
	t.Run("same key id", func(t *testing.T) {
		forged := resign(t, append([]string(nil), ls...), signer(t, "k1"), fix)
		wantOnly(t, verify(t, join(forged), nil), `the checkpoint of entries 1–4 does not verify: its signature does not verify with key "k1"`)
	})
	t.Run("keys of the bundle replaced", func(t *testing.T) {
		other := signer(t, "k1")
		forged := resign(t, append([]string(nil), ls...), other, fix)
		var h audit.Header
		_ = json.Unmarshal([]byte(forged[0]), &h)
		h.Keys = other.Keys().JWKS()
		hb, _ := json.Marshal(h)
		forged[0] = string(hb)
		// The bundle agrees with itself; the published keys do not.
		wantOnly(t, verify(t, join(forged), nil))
		wantOnly(t, verify(t, join(forged), s.Keys()), `the checkpoint of entries 1–4 does not verify: its signature does not verify with key "k1"`)
	})
}

func TestRemovedCheckpointIsNamed(t *testing.T) {
	s := signer(t, "k1")
	ls := lines(export(t, s, logOf(t, s, 12, 4), time.Time{}, time.Time{}))
	var kept []string
	n := 0
	for _, l := range ls {
		var line audit.Line
		_ = json.Unmarshal([]byte(l), &line)
		if line.Checkpoint != "" {
			if n++; n == 2 {
				continue
			}
		}
		kept = append(kept, l)
	}
	wantOnly(t, verify(t, join(kept), nil),
		"the checkpoint of entries 11–14 does not continue the one of entries 1–4",
		"entry 6 (ev_05) inserted", "entry 7 (ev_06) inserted", "entry 8 (ev_07) inserted", "entry 9 (ev_08) inserted",
		"its end line says 12 and 3 were written")
}

func TestExportOfATimeRangeHoldsWholeCheckpoints(t *testing.T) {
	s := signer(t, "k1")
	msgs := logOf(t, s, 12, 4)
	// ev_06 at t0+6m: only the second checkpoint's entries (ev_05..ev_08).
	bundle := export(t, s, msgs, t0.Add(6*time.Minute), t0.Add(6*time.Minute))
	rep := verify(t, bundle, s.Keys())
	wantOnly(t, rep)
	if rep.Entries != 4 || rep.Checkpoints != 1 || rep.HeadSeq != 9 {
		t.Fatalf("report %+v: want the 4 entries of one checkpoint, ending at 9", rep)
	}
}

func TestExportSkipsCheckpointsRetentionCut(t *testing.T) {
	s := signer(t, "k1")
	msgs := logOf(t, s, 12, 4)
	bundle := export(t, s, msgs[3:], time.Time{}, time.Time{}) // entries 1..3 aged out
	rep := verify(t, bundle, s.Keys())
	wantOnly(t, rep)
	if rep.Entries != 8 || rep.Checkpoints != 2 {
		t.Fatalf("report %+v: want the 8 entries of the two whole checkpoints", rep)
	}
}

func TestChainHash(t *testing.T) {
	// SHA-256(32 zero bytes || 32 bytes of 0x01 || 00 00 00 00 00 00 00 07)
	var leaf audit.Hash
	for i := range leaf {
		leaf[i] = 1
	}
	const want = "8a534c80096c046265b84a152d50663315c30d9572f0438b7f9ad312fe9df434" // computed independently
	got := audit.Hex(audit.Next(audit.Genesis, leaf, 7))
	if got != want {
		t.Fatalf("chain hash %s, want %s", got, want)
	}
}

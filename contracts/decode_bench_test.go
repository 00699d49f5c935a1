package contracts_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// benchDecode compares Decode with plain json.Unmarshal on a golden
// message, the overhead of refusing duplicate keys on the hot path.
func benchDecode[T any](b *testing.B, golden string) {
	data, err := os.ReadFile("testdata/golden/" + golden)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var v T
			if err := json.Unmarshal(data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var v T
			if err := contracts.Decode(data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CheckDuplicateKeys", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := contracts.CheckDuplicateKeys(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeVote(b *testing.B) { benchDecode[contracts.Vote](b, "vote.edit.json") }

func BenchmarkDecodeRequest(b *testing.B) {
	benchDecode[contracts.ApprovalRequested](b, "approval.requested.json")
}

func BenchmarkDecodeRecord(b *testing.B) { benchDecode[contracts.Record](b, "record.approved.json") }

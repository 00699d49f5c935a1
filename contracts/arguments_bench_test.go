package contracts_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
)

// typicalArguments is a tool call's arguments of about 300 bytes, keys out of
// order and a number that needs canonical formatting.
var typicalArguments = []byte(`{"recipient":"ACME GmbH","iban":"DE89370400440532013000",` +
	`"bic":"COBADEFFXXX","amount":1250.750,"currency":"EUR","reference":"INV-2025-00042",` +
	`"memo":"Quarterly licence renewal for the analytics platform, budget line 7.3",` +
	`"tags":["finance","recurring","q3"],"execute_at":"2025-07-01T09:00:00Z","dry_run":false}`)

func BenchmarkArgumentsSHA256(b *testing.B) {
	b.SetBytes(int64(len(typicalArguments)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := contracts.ArgumentsSHA256(typicalArguments); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	b.SetBytes(int64(len(typicalArguments)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := contracts.Canonicalize(typicalArguments); err != nil {
			b.Fatal(err)
		}
	}
}

package contracts_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
)

// approvalRecordJSON is shaped like an approval record as it is hashed:
// about 1.5 KB, objects nested four levels deep, arrays of objects, RFC 3339
// timestamps, a few integers and a float, one string with a non-ASCII
// character and one with an escaped quote.
var approvalRecordJSON = []byte(`{
  "id": "apr_01J8ZK3QW6X4N2M7P5R9T0V1B3",
  "status": "approved",
  "tenant": "acme-prod",
  "tool": "payments.transfer",
  "created_at": "2025-07-01T08:59:12.483Z",
  "updated_at": "2025-07-01T09:02:47.119Z",
  "deadline": "2025-07-01T10:59:12Z",
  "arguments_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
  "requester": {"id": "agent-billing-7", "kind": "agent", "display_name": "Billing agent"},
  "arguments": {
    "recipient": "Müller Logistik GmbH",
    "amount": 1250.75,
    "currency": "EUR",
    "reference": "INV-2025-00042",
    "memo": "Renewal \"analytics\" licence",
    "execute_at": "2025-07-01T09:00:00Z"
  },
  "policy": {
    "rule": "payments-over-1000",
    "version": 14,
    "quorum": {"required": 2, "order": "any", "step_up": "passkey"},
    "claim_within": "15m"
  },
  "votes": [
    {
      "approver": {"id": "u-1842", "email": "dana@acme.example", "role": "finance"},
      "decision": "approve",
      "at": "2025-07-01T09:01:03.551Z",
      "step_up": {"kind": "passkey", "credential": "cred-7a1f", "verified_at": "2025-07-01T09:01:02Z"},
      "comment": ""
    },
    {
      "approver": {"id": "u-2210", "email": "lee@acme.example", "role": "controller"},
      "decision": "approve",
      "at": "2025-07-01T09:02:47.119Z",
      "step_up": {"kind": "passkey", "credential": "cred-19c4", "verified_at": "2025-07-01T09:02:45Z"},
      "comment": "ok for Q3"
    }
  ],
  "refusals": [
    {"approver": "u-3001", "reason": "self_approval", "at": "2025-07-01T09:00:31Z", "sequence": 3}
  ],
  "trace": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "sampled": true},
  "limits": {"max_votes": 16, "max_payload": 65536, "max_comment": 2048},
  "sequence": 7,
  "dry_run": false,
  "claimed_by": null
}`)

// smallArgumentsJSON is a short tool-call arguments object.
var smallArgumentsJSON = []byte(`{"path":"/srv/app/config.yaml","mode":"0644","backup":true,"retries":3}`)

func BenchmarkCanonicalizeRecord(b *testing.B) {
	benchmarkCanonicalize(b, approvalRecordJSON)
}

func BenchmarkCanonicalizeSmall(b *testing.B) {
	benchmarkCanonicalize(b, smallArgumentsJSON)
}

func benchmarkCanonicalize(b *testing.B, in []byte) {
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := contracts.Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}

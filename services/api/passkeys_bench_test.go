package api_test

import (
	"net/http"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey/passkeytest"
)

// BenchmarkPasskeyApproval is one approval from review to decision over
// HTTP, without a step-up (plain) and with one (passkey: the statement is
// fetched, signed with an ES256 passkey and checked by the arbiter). The
// difference is what a passkey adds on the server's side; the person's
// touch or face on their device comes on top.
func BenchmarkPasskeyApproval(b *testing.B) {
	for _, mode := range []struct{ name, tool string }{{"plain", "plain.send"}, {"passkey", "email.send"}} {
		b.Run(mode.name, func(b *testing.B) {
			e := setupPasskeys(b)
			alice := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
			e.enrol(b, "alice", alice)
			b.ResetTimer()
			for range b.N {
				id := e.pending(b, mode.tool, `{"to":"a@example.com"}`)
				body := map[string]any{"decision": "approve"}
				if mode.tool == "email.send" {
					body["passkey"] = alice.Sign(e.statement(b, "alice", id))
				}
				r := e.call(b, "POST", "/v1/approvals/"+id+"/votes", "alice", body)
				var ans recordAnswer
				r.decode(b, &ans)
				if r.status != http.StatusOK || ans.Record.Status != contracts.StatusApproved {
					b.Fatalf("vote: %d %s", r.status, r.body)
				}
			}
		})
	}
}

package arbiter_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// FuzzBusMessages reads a request and a message that follows it (a vote,
// command, record, decided or changed event) as the bus consumers do:
// decoding never accepts a document that repeats a key, and whatever
// decodes and passes validation is applied without a panic, leaving a
// record that encodes and decodes again.
func FuzzBusMessages(f *testing.F) {
	golden := func(name string) []byte {
		data, err := os.ReadFile("../../contracts/testdata/golden/" + name)
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	req := golden("approval.requested.json")
	reqAt := func(old, new string) []byte { return []byte(strings.Replace(string(req), old, new, 1)) }
	for _, name := range []string{"vote.approve.json", "vote.edit.json", "command.claim.json", "record.approved.json", "decided.json", "changed.json"} {
		f.Add(req, golden(name))
	}
	vote := golden("vote.approve.json")
	voteAt := func(old, new string) []byte { return []byte(strings.Replace(string(vote), old, new, 1)) }
	// Repeated keys: at the top, nested, escaped.
	f.Add(req, voteAt(`"decision": "approve"`, `"decision": "reject", "comment": "wrong account", "decision": "approve"`))
	f.Add(req, voteAt(`"decision": "approve"`, `"decision": "approve", "approver": {"id": "u_alice", "\u0069d": "u_mallory"}`))
	f.Add(reqAt(`"run": {`, `"run": {"id": "other"}, "run": {`), vote)
	f.Add(reqAt(`"amount_cents": 12500`, `"amount_cents": 12500, "amount_cents": 1`), vote)
	// Sizes: 100 KB and 900 KB comments, arguments of 600 KiB.
	f.Add(req, voteAt(`"decision": "approve"`, `"decision": "reject", "comment": "`+strings.Repeat("c", 100_000)+`"`))
	f.Add(req, voteAt(`"decision": "approve"`, `"decision": "reject", "comment": "`+strings.Repeat("c", 900_000)+`"`))
	f.Add(reqAt(`"reason": "duplicate"`, `"reason": "`+strings.Repeat("r", 600<<10)+`"`), vote)
	// No approvers, and time approves.
	f.Add(reqAt(`"approvers": ["u_alice", "u_bob", "u_carol"]`, `"approvers": []`), []byte(`{}`))
	noApprovers := reqAt(`"approvers": ["u_alice", "u_bob", "u_carol"]`, `"approvers": []`)
	noApprovers = []byte(strings.Replace(string(noApprovers), `"on_timeout": "reject"`, `"on_timeout": "approve"`, 1))
	f.Add(noApprovers, vote)
	f.Add([]byte(`null`), []byte(`[]`))

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, reqData, msgData []byte) {
		dup := func(data []byte) bool {
			return errors.Is(contracts.CheckDuplicateKeys(data), contracts.ErrDuplicateKey)
		}
		var r contracts.ApprovalRequested
		err := contracts.Decode(reqData, &r)
		if err == nil && dup(reqData) {
			t.Fatal("a request that repeats a key was decoded")
		}
		var (
			v   contracts.Vote
			c   contracts.Command
			rec contracts.Record
			d   contracts.Decided
			ch  contracts.Changed
		)
		decoded := map[string]error{
			"vote": contracts.Decode(msgData, &v), "command": contracts.Decode(msgData, &c), "record": contracts.Decode(msgData, &rec),
			"decided": contracts.Decode(msgData, &d), "changed": contracts.Decode(msgData, &ch),
		}
		for kind, derr := range decoded {
			if derr == nil && dup(msgData) {
				t.Fatalf("a %s that repeats a key was decoded", kind)
			}
		}
		if err != nil || approval.ValidateRequest(&r) != nil {
			return
		}
		if r.Quorum.Required < 1 {
			r.Quorum.Required = 1
		}
		current := approval.NewRecord(r, now)
		check := func(res approval.Result) {
			if !res.Changed {
				return
			}
			data, err := json.Marshal(res.Record)
			if err != nil {
				t.Fatalf("the new record does not encode: %v", err)
			}
			var again contracts.Record
			if err := contracts.Decode(data, &again); err != nil {
				t.Fatalf("the new record does not decode: %v", err)
			}
		}
		if decoded["vote"] == nil {
			v.EventID = r.EventID
			check(approval.ApplyVote(current, v, now))
		}
		if decoded["command"] == nil {
			c.EventID = r.EventID
			check(approval.ApplyCommand(current, c, now))
		}
		check(approval.Expire(current, r.ExpiresAt.Add(time.Second)))
	})
}

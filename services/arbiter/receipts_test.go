package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval/approvaltest"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/services/arbiter"
)

// TestClaimIssuesReceiptOutsideTheRecord: the record that accepts a claim
// names its receipt's id, and the receipt, signed by the arbiter for the
// approved (edited) arguments, is stored for the claimant in hitl_receipts,
// never in the record that the notifier and every reader read; the same
// claim sent again leaves both as they are; another claim is refused and
// gets none.
func TestClaimIssuesReceiptOutsideTheRecord(t *testing.T) {
	t.Parallel()
	b := newClockBus(t)
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key, Now: b.clock.Now, TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.startArbiter(arbiter.Config{Receipts: signer})
	req := b.request(time.Hour)
	b.create(req)
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionEdit,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: b.clock.Now().UTC(),
		Arguments: []byte(approvaltest.EditedArgs),
	})
	approved := b.waitRecord(req.EventID, terminal)
	if approved.Status != contracts.StatusApproved {
		t.Fatalf("status %s", approved.Status)
	}
	claim := func(claimID string) uint64 {
		return b.command(contracts.Command{
			Spec: contracts.SpecCommand, CommandID: claimID, EventID: req.EventID, Command: contracts.CommandClaim,
			By: "billing", ClaimID: claimID, IssuedAt: b.clock.Now().UTC(),
		})
	}
	claim("claim-1")
	rec := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.Claim != nil })
	// The receipt is stored before the claim is announced.
	b.waitChanged(req.EventID, contracts.ChangeClaimed)
	if rec.Claim.Receipt != "" || rec.Claim.ReceiptID == "" {
		t.Fatalf("the record's claim holds receipt %q, receipt id %q; want only the id", rec.Claim.Receipt, rec.Claim.ReceiptID)
	}
	_, rev := b.record(req.EventID)
	issued := b.issuedReceipt(req.EventID)
	if issued.ClaimID != "claim-1" || issued.By != "billing" || issued.Receipt == "" {
		t.Fatalf("stored receipt %+v", issued)
	}
	rec.Claim.Receipt = issued.Receipt

	opts := receipt.Options{Keys: receipt.NewKeySet(key), Replay: receipt.NewMemoryReplayStore(), Now: b.clock.Now}
	ctx := context.Background()
	if _, err := receipt.Verify(ctx, rec.Claim.Receipt, req.ToolCall.Name, req.ToolCall.Arguments, opts); !errors.Is(err, receipt.ErrArgumentsDiffer) {
		t.Fatalf("the receipt verified for the requested arguments, not the edited ones: %v", err)
	}
	c, err := receipt.Verify(ctx, rec.Claim.Receipt, req.ToolCall.Name, []byte(approvaltest.EditedArgs), opts)
	if err != nil {
		t.Fatal(err)
	}
	want := receipt.Claims{
		Issuer: receipt.DefaultIssuer, ID: rec.Claim.ReceiptID, IssuedAt: b.clock.Now().Unix(), ExpiresAt: b.clock.Now().Add(2 * time.Minute).Unix(),
		EventID: req.EventID, ClaimID: "claim-1", Tenant: req.Run.Tenant, Agent: req.Run.Agent, RunID: req.Run.ID,
		ToolCallID: req.ToolCall.ID, Tool: req.ToolCall.Name, ArgsSHA256: approved.Outcome.ArgumentsSHA256,
		Basis: receipt.BasisApproval, DecidedBy: []string{"alice"}, Quorum: &receipt.Quorum{Required: 1, Approvals: 1},
		Rule: req.Policy.Rule, PolicyVersion: req.Policy.Version,
	}
	if got, exp := mustJSON(t, c), mustJSON(t, want); got != exp {
		t.Fatalf("claims\n got %s\nwant %s", got, exp)
	}

	// The same claim again (a retry): nothing is written, the receipt stays.
	claim("claim-1")
	claim("claim-2")
	b.waitChanged(req.EventID, contracts.ChangeClaimRefused)
	again, rev2 := b.record(req.EventID)
	if rev2 != rev || again.Claim.ReceiptID != rec.Claim.ReceiptID {
		t.Fatalf("a retried or refused claim changed the record (revision %d → %d)", rev, rev2)
	}
	if after := b.issuedReceipt(req.EventID); after != issued {
		t.Fatalf("a retried or refused claim changed the receipt: %+v, was %+v", after, issued)
	}
}

// issuedReceipt reads the receipt stored for approval id.
func (b *bus) issuedReceipt(id string) contracts.IssuedReceipt {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, contracts.BucketReceipts)
	if err != nil {
		b.t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		b.t.Fatalf("receipt of %s: %v", id, err)
	}
	var r contracts.IssuedReceipt
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		b.t.Fatal(err)
	}
	return r
}

// A record that cannot run a tool gets no receipt: without a signer there
// is none either, and the claim is still accepted.
func TestClaimWithoutSignerHasNoReceipt(t *testing.T) {
	t.Parallel()
	b := timerBus(t)
	req := b.request(time.Hour)
	b.create(req)
	b.vote(contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: req.EventID, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}, DecidedAt: b.clock.Now().UTC(),
	})
	b.waitRecord(req.EventID, terminal)
	b.command(contracts.Command{Spec: contracts.SpecCommand, CommandID: "c", EventID: req.EventID, Command: contracts.CommandClaim, By: "billing", ClaimID: "c"})
	rec := b.waitRecord(req.EventID, func(r *contracts.Record) bool { return r.Claim != nil })
	if rec.Claim.Receipt != "" || rec.Claim.ReceiptID != "" {
		t.Fatal("a receipt without a signer")
	}
}

func (b *bus) waitChanged(id, change string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{contracts.ChangedSubject(id)}})
	if err != nil {
		b.t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			b.t.Fatalf("no %s change of %s: %v", change, id, err)
		}
		var c contracts.Changed
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			b.t.Fatal(err)
		}
		if c.Change == change {
			return
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := contracts.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

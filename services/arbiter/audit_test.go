package arbiter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAuditLogsEveryChangeOnceInOneSignedChain: two replicas share the
// receipt key; every change they make (the request, its decision, a claim
// and a refused one) is logged once, a vote sent again logs nothing new,
// each entry's record hash is the hash of the record at its revision, and
// the checkpoints both replicas sign make one chain that verifies; every
// entry names the request's tenant.
func TestAuditLogsEveryChangeOnceInOneSignedChain(t *testing.T) {
	t.Parallel()
	b := newBus(t, events.ProvisionConfig{})
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		b.startArbiter(arbiter.Config{Receipts: signer, Audit: arbiter.AuditConfig{CheckpointEvery: 2, CheckpointInterval: 50 * time.Millisecond}})
	}
	req := request(t, anyApprover)
	req.Run.Tenant = "acme"
	b.create(req)
	v := vote("vote-1", "alice", contracts.DecisionApprove)
	b.vote(v)
	b.waitRecord(eventID, terminal)
	b.acks.wait(t, b.vote(v), "+ACK") // sent again: the decision is announced and logged once
	claim := func(id string) {
		b.command(contracts.Command{Spec: contracts.SpecCommand, CommandID: id, EventID: eventID, Command: contracts.CommandClaim,
			By: req.Run.Agent, ClaimID: id, IssuedAt: busNow().UTC()})
	}
	claim("claim-1")
	b.waitChanged(eventID, contracts.ChangeClaimed)
	claim("claim-2")
	b.waitChanged(eventID, contracts.ChangeClaimRefused)

	entries := b.auditEntries()
	var changes []string
	for _, e := range entries {
		changes = append(changes, e.entry.Change)
	}
	if got := strings.Join(changes, " "); got != "created decided claimed claim_refused" {
		t.Fatalf("logged changes %q, want created decided claimed claim_refused", got)
	}
	for _, e := range entries {
		if e.entry.Tenant != "acme" {
			t.Errorf("%s logged tenant %q, want the request's acme", e.entry.Change, e.entry.Tenant)
		}
	}
	rec, rev := b.kvEntry(eventID)
	for _, e := range entries[2:] { // a refused claim writes nothing: both name the claim's revision
		if e.entry.Revision != rev || e.entry.RecordSHA256 != rec {
			t.Errorf("%s logged revision %d hash %s; the record at %d hashes %s", e.entry.Change, e.entry.Revision, e.entry.RecordSHA256, rev, rec)
		}
	}
	if entries[0].entry.Revision == 0 || entries[0].entry.RecordSHA256 == "" || entries[0].entry.By != req.Run.Agent {
		t.Errorf("created entry %+v: want its revision, record hash and agent", entries[0].entry)
	}

	// Every entry is signed, in one chain, whichever replica signed. The
	// checkpoints are read from the stream: a core subscriber would also
	// see one the stream refused (the other replica stored first).
	last := entries[len(entries)-1].at
	ctx, cancel := context.WithTimeout(context.Background(), busWait)
	defer cancel()
	checkpoints, err := b.js.OrderedConsumer(ctx, audit.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{audit.SubjectCheckpoint}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := checkpoints.Next(jetstream.FetchMaxWait(busWait))
		if err != nil {
			t.Fatalf("no stored checkpoint covers entry %d: %v", last, err)
		}
		c, err := audit.PayloadOf(string(m.Data()))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Last().Before(last) {
			break
		}
	}
	var bundle bytes.Buffer
	if err := auditlog.Export(context.Background(), b.js, &bundle, audit.Header{Keys: signer.Keys().JWKS()}, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, rep, err := audit.Verify(context.Background(), &bundle, signer.Keys())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Entries != 4 || rep.Signed != 4 || rep.Unsigned != 0 {
		t.Fatalf("verify: %+v, want 4 entries all signed and no problem", rep)
	}
}

type loggedEntry struct {
	at    audit.Pos
	entry audit.Entry
}

// auditEntries reads every entry of the audit log, those stored alone and
// those of batches.
func (b *bus) auditEntries() []loggedEntry {
	b.t.Helper()
	var out []loggedEntry
	for _, m := range b.messages(audit.Stream, audit.SubjectPrefix+">") {
		md, err := m.Metadata()
		if err != nil {
			b.t.Fatal(err)
		}
		raws, first, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			b.t.Fatal(err)
		}
		for i, raw := range raws {
			var e audit.Entry
			if err := json.Unmarshal(raw, &e); err != nil {
				b.t.Fatal(err)
			}
			at := audit.Pos{Seq: md.Sequence.Stream}
			if first != 0 {
				at.Index = first + i
			}
			out = append(out, loggedEntry{at: at, entry: e})
		}
	}
	return out
}

// kvEntry is the hash of the record of id as stored, and its revision.
func (b *bus) kvEntry(id string) (string, uint64) {
	b.t.Helper()
	entry, err := b.kv.Get(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	sum, err := audit.RecordSHA256(entry.Value())
	if err != nil {
		b.t.Fatal(err)
	}
	return sum, entry.Revision()
}

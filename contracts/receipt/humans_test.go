package receipt_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/contracts/passkey/passkeytest"
	"github.com/countersign/countersign/contracts/receipt"
)

// humansPath holds the shared cases of receipts the approvers signed: read
// by the Go, TypeScript and Python verifiers. ES256 signatures are
// randomized, so the file is written once (-update) and every suite checks
// its cases, rather than rebuilding it byte for byte.
const humansPath = "../testdata/receipts/humans.json"

// HumansFixtures are the shared cases of Options.Humans.
type HumansFixtures struct {
	Comment string          `json:"comment"`
	JWKS    json.RawMessage `json:"jwks"`
	Issuer  string          `json:"issuer"`
	// Approvers is the signed approvers document (alice: ES256, bob:
	// EdDSA, carol: revoked).
	Approvers string       `json:"approvers"`
	Cases     []HumansCase `json:"cases"`
}

// HumansCase is one verification with Humans{Min, People} at Now.
type HumansCase struct {
	Name      string          `json:"name"`
	Receipt   string          `json:"receipt"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Now       int64           `json:"now"`
	Min       int             `json:"min"`
	People    []string        `json:"people,omitempty"`
	Expect    string          `json:"expect"`
}

const (
	humansRP     = "inbox.example.com"
	humansOrigin = "https://inbox.example.com"
	humansEvent  = "0193f1a4-7c1e-7d53-9b7a-8f3c2e1d0a01"
)

func buildHumans(t *testing.T) HumansFixtures {
	t.Helper()
	key := seedKey(t, "2026-01")
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key, Now: func() time.Time { return fixtureNow }})
	if err != nil {
		t.Fatal(err)
	}
	alice := passkeytest.NewES256(humansRP, humansOrigin, []byte("alice"))
	alice2 := passkeytest.NewEdDSA(humansRP, humansOrigin, []byte("alice-phone"))
	bob := passkeytest.NewEdDSA(humansRP, humansOrigin, []byte("bob"))
	carol := passkeytest.NewES256(humansRP, humansOrigin, []byte("carol"))
	mallory := passkeytest.NewES256(humansRP, humansOrigin, []byte("mallory"))
	evil := passkeytest.NewES256(humansRP, "https://evil.example", []byte("alice"))
	noUV := passkeytest.NewES256(humansRP, humansOrigin, []byte("alice"))
	noUV.Flags = 0x01
	revoked := fixtureNow.Add(-time.Hour)
	doc, err := signer.SignApprovers(receipt.Approvers{
		RPID: humansRP, Origins: []string{humansOrigin},
		Keys: []receipt.ApproverKey{
			{Person: "alice", CredentialID: alice.ID, PublicKey: alice.JWK(), CreatedAt: fixtureNow.Add(-48 * time.Hour)},
			{Person: "alice", CredentialID: alice2.ID, PublicKey: alice2.JWK(), CreatedAt: fixtureNow.Add(-48 * time.Hour)},
			{Person: "bob", CredentialID: bob.ID, PublicKey: bob.JWK(), CreatedAt: fixtureNow.Add(-48 * time.Hour)},
			{Person: "carol", CredentialID: carol.ID, PublicKey: carol.JWK(), CreatedAt: fixtureNow.Add(-48 * time.Hour), RevokedAt: &revoked},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"amount":1250,"recipient":"Globex GmbH"}`)
	sha, _ := contracts.ArgumentsSHA256(args)
	edited := json.RawMessage(`{"amount":900,"recipient":"Globex GmbH"}`)
	editedSHA, _ := contracts.ArgumentsSHA256(edited)
	signedAt := fixtureNow.Add(-2 * time.Minute)
	st := func(who, decision, editSHA string, at time.Time) passkey.Statement {
		base := sha
		if who == "bob" && editSHA == "" && decision == contracts.DecisionApprove && at.Equal(signedAt.Add(time.Second)) {
			base = editedSHA // bob approves alice's edit
		}
		return passkey.NewStatement(humansEvent, who, "payments.send", base, decision, editSHA, at)
	}
	approve := func(who string) passkey.Statement { return st(who, contracts.DecisionApprove, "", signedAt) }
	claims := func(id string, sigs ...contracts.PasskeyAssertion) receipt.Claims {
		return receipt.Claims{
			ID: id, EventID: humansEvent, ClaimID: "claim-1", Agent: "billing-bot", Tool: "payments.send",
			ArgsSHA256: sha, Basis: receipt.BasisApproval, DecidedBy: []string{"alice", "bob"},
			Quorum: &receipt.Quorum{Required: 2, Approvals: 2}, Rule: "payments", PolicyVersion: "v3",
			StepUp: contracts.StepUpPasskey, Signatures: sigs,
		}
	}
	sign := func(c receipt.Claims) string {
		tok, err := signer.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	both := claims("h-valid", alice.Sign(approve("alice")), bob.Sign(approve("bob")))
	editedC := claims("h-edited", alice.Sign(st("alice", contracts.DecisionEdit, editedSHA, signedAt)),
		bob.Sign(st("bob", contracts.DecisionApprove, "", signedAt.Add(time.Second))))
	editedC.ArgsSHA256 = editedSHA
	serverOnly := claims("h-server-only")
	serverOnly.StepUp = ""
	forged := claims("h-forged-step-up")
	policyC := receipt.Claims{ID: "h-policy", Agent: "billing-bot", Tool: "payments.send", ArgsSHA256: sha, Basis: receipt.BasisPolicy, DecidedBy: []string{"policy"}}
	one := claims("h-one", alice.Sign(approve("alice")))
	one.Quorum = &receipt.Quorum{Required: 1, Approvals: 1}
	twiceAlice := claims("h-alice-twice", alice.Sign(approve("alice")), alice2.Sign(approve("alice")))
	otherArgs := st("bob", contracts.DecisionApprove, "", signedAt)
	otherArgs.ArgumentsSHA256 = editedSHA
	otherEvent := approve("bob")
	otherEvent.EventID = "0193f1a4-7c1e-7d53-9b7a-8f3c2e1d0a02"
	bobAsAlice := approve("alice")
	rejected := st("bob", contracts.DecisionReject, "", signedAt)
	stale := st("bob", contracts.DecisionApprove, "", fixtureNow.Add(-25*time.Hour))
	swapped := bob.Sign(approve("bob"))
	swapped.Statement = otherArgs.Canonical()
	withBob := func(id string, a contracts.PasskeyAssertion) string {
		return sign(claims(id, alice.Sign(approve("alice")), a))
	}
	now := fixtureNow.Add(time.Minute).Unix()
	c := func(name, tok string, a json.RawMessage, expect string) HumansCase {
		return HumansCase{Name: name, Receipt: tok, Tool: "payments.send", Arguments: a, Now: now, Min: 1, Expect: expect}
	}
	cases := []HumansCase{
		c("alice (ES256) and bob (EdDSA) signed", sign(both), args, "ok"),
		c("alice signed her edit, bob approved it", sign(editedC), edited, "ok"),
		c("the server's key alone, no step-up", sign(serverOnly), args, "receipt_signatures_missing"),
		c("the server's key alone, claiming step-up", sign(forged), args, "receipt_signatures_missing"),
		c("a policy receipt", sign(policyC), args, "receipt_signatures_missing"),
		c("one signer where the rule required two", sign(claims("h-one-of-two", alice.Sign(approve("alice")))), args, "receipt_signatures_missing"),
		c("one person with two passkeys is one signer", sign(twiceAlice), args, "receipt_signatures_missing"),
		c("a signature over other arguments", withBob("h-other-args", bob.Sign(otherArgs)), args, "receipt_signature_invalid"),
		c("a signature for another request", withBob("h-other-event", bob.Sign(otherEvent)), args, "receipt_signature_invalid"),
		c("bob's passkey over alice's statement", withBob("h-bob-as-alice", bob.Sign(bobAsAlice)), args, "receipt_signature_invalid"),
		c("a signed rejection", withBob("h-reject", bob.Sign(rejected)), args, "receipt_signature_invalid"),
		c("a statement a day older than the receipt", withBob("h-stale", bob.Sign(stale)), args, "receipt_signature_invalid"),
		c("a statement swapped under the signature", withBob("h-swapped", swapped), args, "receipt_signature_invalid"),
		c("a revoked passkey", withBob("h-revoked", carol.Sign(approve("carol"))), args, "receipt_signature_invalid"),
		c("a passkey nobody enrolled", withBob("h-unknown", mallory.Sign(approve("bob"))), args, "receipt_signature_invalid"),
		c("asserted on another origin", withBob("h-origin", evil.Sign(approve("bob"))), args, "receipt_signature_invalid"),
		c("the user was not verified", sign(claims("h-no-uv", noUV.Sign(approve("alice")), bob.Sign(approve("bob")))), args, "receipt_signature_invalid"),
	}
	onlyBob := c("a tool that accepts only bob's signature", sign(both), args, "receipt_signature_invalid")
	onlyBob.People = []string{"bob"}
	three := c("a tool that requires three people", sign(both), args, "receipt_signatures_missing")
	three.Min = 3
	oneOK := c("one signer where the rule required one", sign(one), args, "ok")
	cases = append(cases, onlyBob, three, oneOK)
	return HumansFixtures{
		Comment: "Shared by the Go, TypeScript and Python receipt verifiers: receipts whose approvals were signed with passkeys (Options.Humans). Written by `go test ./contracts/receipt -run TestHumansFixtures -update`; every suite checks each case.",
		JWKS:    mustJSON(t, receipt.NewKeySet(key).JWKS()), Issuer: receipt.DefaultIssuer, Approvers: doc, Cases: cases,
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkHumansCases(t *testing.T, f HumansFixtures) {
	keys, err := receipt.ParseJWKS(f.JWKS)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			now := func() time.Time { return time.Unix(c.Now, 0) }
			doc, err := receipt.ParseApprovers(context.Background(), f.Approvers, keys, f.Issuer, now())
			if err != nil {
				t.Fatal(err)
			}
			_, err = receipt.Verify(context.Background(), c.Receipt, c.Tool, c.Arguments, receipt.Options{
				Keys: keys, Issuer: f.Issuer, Now: now, Replay: receipt.NewMemoryReplayStore(),
				Humans: &receipt.Humans{Min: c.Min, People: c.People, Approvers: doc},
			})
			if code := codeOf(err); code != c.Expect {
				t.Fatalf("got %s (%v), want %s", code, err, c.Expect)
			}
		})
	}
}

func TestHumansFixtures(t *testing.T) {
	built := buildHumans(t)
	checkHumansCases(t, built)
	if *update {
		data, err := json.MarshalIndent(built, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(humansPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(humansPath)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	var read HumansFixtures
	if err := json.Unmarshal(data, &read); err != nil {
		t.Fatal(err)
	}
	if len(read.Cases) != len(built.Cases) {
		t.Fatalf("%s has %d cases, the generator %d: run with -update", humansPath, len(read.Cases), len(built.Cases))
	}
	checkHumansCases(t, read)
}

func TestApproversDocumentIsNotAReceipt(t *testing.T) {
	f := buildHumans(t)
	keys, _ := receipt.ParseJWKS(f.JWKS)
	now := func() time.Time { return fixtureNow }
	if _, err := receipt.Inspect(context.Background(), f.Approvers, receipt.Options{Keys: keys, Now: now}); codeOf(err) != "receipt_malformed" {
		t.Fatalf("the approvers document read as a receipt: %v", err)
	}
	if _, err := receipt.ParseApprovers(context.Background(), f.Cases[0].Receipt, keys, "", fixtureNow); err == nil {
		t.Fatal("a receipt read as the approvers document")
	}
	if _, err := receipt.ParseApprovers(context.Background(), f.Approvers, keys, "", fixtureNow.Add(receipt.ApproversTTL)); codeOf(err) != "receipt_expired" {
		t.Fatalf("an expired approvers document: %v", err)
	}
}

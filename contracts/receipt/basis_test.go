package receipt_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/receipt"
)

// A tool that lists the bases it accepts refuses the others, and a
// refused receipt keeps its id for a tool that accepts it.
func TestToolRequiresBasis(t *testing.T) {
	k := seedKey(t, "a")
	clk := &clock{t: fixtureNow}
	s, err := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"n":1}`
	sign := func(basis string) string {
		c := approvalClaims(t, "tool", args)
		c.Basis = basis
		if basis == receipt.BasisGrant {
			c.Grant = "g-1"
		}
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	replay := receipt.NewMemoryReplayStore()
	humans := receipt.Options{Keys: receipt.NewKeySet(k), Replay: replay, Now: clk.Now,
		Bases: []string{receipt.BasisApproval, receipt.BasisGrant}}
	for _, basis := range []string{receipt.BasisApproval, receipt.BasisGrant} {
		if c, err := receipt.Verify(context.Background(), sign(basis), "tool", []byte(args), humans); err != nil || c.Basis != basis {
			t.Fatalf("%s receipt: %v, %+v", basis, err, c)
		}
	}
	pol := sign(receipt.BasisPolicy)
	_, err = receipt.Verify(context.Background(), pol, "tool", []byte(args), humans)
	if !errors.Is(err, receipt.ErrBasisNotAccepted) || receipt.Code(err) != "receipt_basis_not_accepted" {
		t.Fatalf("policy receipt where humans must approve: %v (%s)", err, receipt.Code(err))
	}
	any := humans
	any.Bases = nil
	if _, err := receipt.Verify(context.Background(), pol, "tool", []byte(args), any); err != nil {
		t.Fatalf("the refused receipt was used up, or a tool without Bases refuses it: %v", err)
	}
}

// A receipt given an exp keeps it only when it comes before the signer's
// TTL: a grant that ends in a minute gives a one-minute receipt, one that
// ends in a week a receipt of the usual TTL.
func TestSignerCapsExpiry(t *testing.T) {
	k := seedKey(t, "a")
	clk := &clock{t: fixtureNow}
	s, _ := receipt.NewSigner(receipt.SignerConfig{Key: k, Now: clk.Now, TTL: 5 * time.Minute})
	opts := receipt.Options{Keys: receipt.NewKeySet(k), Replay: receipt.NewMemoryReplayStore(), Now: clk.Now}
	for _, tc := range []struct {
		exp, want time.Time
	}{
		{fixtureNow.Add(time.Minute), fixtureNow.Add(time.Minute)},
		{fixtureNow.Add(7 * 24 * time.Hour), fixtureNow.Add(5 * time.Minute)},
	} {
		c := approvalClaims(t, "tool", `{}`)
		c.ExpiresAt = tc.exp.Unix()
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := receipt.Inspect(context.Background(), tok, opts)
		if err != nil || got.ExpiresAt != tc.want.Unix() {
			t.Fatalf("exp asked %s: %v, got %d want %d", tc.exp, err, got.ExpiresAt, tc.want.Unix())
		}
	}
}

package contracts_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/contracts"
)

func TestTraceparent(t *testing.T) {
	// The W3C specification's example.
	const ex = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if !contracts.ValidTraceparent(ex) || contracts.TraceID(ex) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the specification's example is not accepted")
	}
	for _, bad := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"} {
		if contracts.ValidTraceparent(bad) {
			t.Errorf("accepted %q", bad)
		}
	}
	child := contracts.ChildTraceparent(ex)
	if !contracts.ValidTraceparent(child) || contracts.TraceID(child) != contracts.TraceID(ex) || child == ex || child[53:] != "01" {
		t.Errorf("child %q of %q", child, ex)
	}
	if n := contracts.NewTraceparent(); !contracts.ValidTraceparent(n) || n == contracts.NewTraceparent() {
		t.Errorf("new traceparent %q", n)
	}
	if nt := contracts.ChildTraceparent("garbage"); !contracts.ValidTraceparent(nt) {
		t.Errorf("child of garbage %q", nt)
	}
	ctx := contracts.WithTraceparent(context.Background(), ex)
	if contracts.TraceparentFrom(ctx) != ex || contracts.TraceparentFrom(contracts.WithTraceparent(context.Background(), "x")) != "" {
		t.Error("context round trip")
	}
}

package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
)

// What the NATS server published on the live policy's key before any
// policy was applied (an answer to someone's request that named the key as
// its reply) is no live policy: serve stores its policy file over it.
func TestServeSeedsItsPolicyOverAnAnswerStoredOnTheLiveKey(t *testing.T) {
	srv := eventstest.NewServer(t)
	admin := srv.JetStream()
	srv.Provision(admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.StoreAnswerOn(embedded.RoleResolver, contracts.BucketPolicy, orchestrator.PolicyKey)
	kv, err := admin.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	const file = "version: \"seed-1\"\nrules:\n  - name: all\n    tools: [\"*\"]\n    action: require_approval\n"
	if err := seedPolicy(ctx, srv.JetStreamAs(embedded.RoleAPI), []byte(file), "policy.yaml", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	doc, err := orchestrator.ReadPolicyVersion(ctx, kv, "seed-1")
	if err != nil || doc.Source != file {
		t.Fatalf("the seeded version: %+v, %v", doc, err)
	}
	live, err := kv.Get(ctx, orchestrator.PolicyKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(live.Value()); !strings.Contains(got, `"version":"seed-1"`) {
		t.Fatalf("the live key after seeding: %.100s", got)
	}
}

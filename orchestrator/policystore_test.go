package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/countersigntest"
)

const policyV1 = `
version: "p1"
default: require_approval
rules:
  - name: small-payments
    tools: ["payments.*"]
    when: 'args.amount <= 100'
    action: allow
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    risk: high
`

const policyV2 = `
version: "p2"
default: require_approval
rules:
  - name: no-payments
    tools: ["payments.*"]
    action: deny
    reason: "Payments are frozen."
`

// openStore opens a policy store whose switches are reported on the returned channel.
func openStore(t *testing.T, e *env) (*orchestrator.PolicyStore, <-chan orchestrator.PolicyDocument) {
	t.Helper()
	changes := make(chan orchestrator.PolicyDocument, 16)
	s, err := orchestrator.OpenPolicyStore(context.Background(), orchestrator.PolicyStoreConfig{
		JS: e.srv.JetStream(), OnChange: func(d orchestrator.PolicyDocument) { changes <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, changes
}

func nextChange(t *testing.T, ch <-chan orchestrator.PolicyDocument, version string) {
	t.Helper()
	select {
	case d := <-ch:
		if d.Version != version {
			t.Fatalf("switched to version %q, want %q", d.Version, version)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no switch to version %q", version)
	}
}

func apply(t *testing.T, e *env, src string) orchestrator.ApplyResult {
	t.Helper()
	res, err := orchestrator.ApplyPolicy(context.Background(), e.js, []byte(src), "admin", time.Now())
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

func TestPolicyStoreServesFallbackUntilApplied(t *testing.T) {
	e := setup(t)
	s, _ := openStore(t, e)
	if _, _, ok := s.Live(); ok {
		t.Fatal("a live policy before any was applied")
	}
	if got := s.Current().Evaluate(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: "anything"}); got.Action != policy.ActionRequireApproval {
		t.Fatalf("fallback decides %s, want require_approval (fail closed)", got.Action)
	}
}

func TestApplySwitchesEveryStore(t *testing.T) {
	e := setup(t)
	a, achanges := openStore(t, e)
	b, bchanges := openStore(t, e)
	// Two orchestrators, each with its own store, connection and gate.
	gates := make([]*orchestrator.Gate, 2)
	for i, s := range []*orchestrator.PolicyStore{a, b} {
		g, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: e.srv.JetStream(), Policy: s})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gates[i] = g
	}
	submit := func(g *orchestrator.Gate, runID string) orchestrator.Verdict {
		t.Helper()
		v, err := g.Submit(context.Background(), contracts.Run{ID: runID, Agent: "billing"},
			[]orchestrator.ToolCall{{ID: "c", Name: "payments.send", Arguments: json.RawMessage(`{"amount":50}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}

	res := apply(t, e, policyV1)
	if !res.Changed || res.Document.Version != "p1" || res.Document.AppliedBy != "admin" || res.Revision == 0 {
		t.Fatalf("apply = %+v", res)
	}
	nextChange(t, achanges, "p1")
	nextChange(t, bchanges, "p1")
	in := policy.Input{Run: contracts.Run{Agent: "billing"}, Tool: "payments.send", Arguments: json.RawMessage(`{"amount":50}`)}
	for i, s := range []*orchestrator.PolicyStore{a, b} {
		if d := s.Current().Evaluate(in); d.Action != policy.ActionAllow || d.Rule != "small-payments" || d.Version != "p1" {
			t.Fatalf("p1 decides %+v, want allow by small-payments", d)
		}
		if v := submit(gates[i], "run-p1"); v.Verdict != orchestrator.VerdictAllowed || v.Rule != "small-payments" {
			t.Fatalf("orchestrator %d under p1: %+v, want allowed", i, v)
		}
	}

	apply(t, e, policyV2)
	nextChange(t, achanges, "p2")
	nextChange(t, bchanges, "p2")
	for i, s := range []*orchestrator.PolicyStore{a, b} {
		if d := s.Current().Evaluate(in); d.Action != policy.ActionDeny || d.Version != "p2" {
			t.Fatalf("p2 decides %+v, want deny", d)
		}
		if v := submit(gates[i], "run-p2"); v.Verdict != orchestrator.VerdictDenied || v.Rule != "no-payments" {
			t.Fatalf("orchestrator %d under p2: %+v, want denied", i, v)
		}
		if doc, _, ok := s.Live(); !ok || doc.Version != "p2" || doc.Source != policyV2 {
			t.Fatalf("live = %+v %v", doc, ok)
		}
	}

	// A store opened later starts on the live policy.
	c, _ := openStore(t, e)
	if got := c.Current().Version(); got != "p2" {
		t.Fatalf("new store serves %q, want p2", got)
	}
}

func TestApplyIsIdempotentAndVersionsAreImmutable(t *testing.T) {
	e := setup(t)
	first := apply(t, e, policyV1)
	again := apply(t, e, policyV1)
	if again.Changed || again.Revision != first.Revision {
		t.Fatalf("re-applying the same content: %+v, want unchanged at revision %d", again, first.Revision)
	}
	edited := policyV1 + "\n  - name: extra\n    tools: [\"x\"]\n    action: allow\n"
	_, err := orchestrator.ApplyPolicy(context.Background(), e.js, []byte(edited), "admin", time.Now())
	if !errors.Is(err, orchestrator.ErrPolicyVersionExists) {
		t.Fatalf("other content under the live version: err %v, want ErrPolicyVersionExists", err)
	}
}

func TestApplyRefusesAnInvalidPolicy(t *testing.T) {
	e := setup(t)
	apply(t, e, policyV1)
	_, err := orchestrator.ApplyPolicy(context.Background(), e.js, []byte("version: bad\nrules:\n  - name: x\n    tools: [\"*\"]\n    action: maybe\n"), "admin", time.Now())
	var perrs *policy.Errors
	if !errors.As(err, &perrs) || len(perrs.Problems) == 0 {
		t.Fatalf("err = %v, want *policy.Errors", err)
	}
	s, _ := openStore(t, e)
	if got := s.Current().Version(); got != "p1" {
		t.Fatalf("live version %q after a refused apply, want p1", got)
	}
}

func TestStoreKeepsThePolicyInForceWhenTheStoredOneIsBroken(t *testing.T) {
	e := setup(t)
	s, changes := openStore(t, e)
	apply(t, e, policyV1)
	nextChange(t, changes, "p1")
	// Someone with write access bypasses validation.
	kv, err := e.js.KeyValue(context.Background(), contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	broken, _ := json.Marshal(orchestrator.PolicyDocument{Spec: orchestrator.SpecPolicyDocument, Version: "broken", Source: "rules: [oops"})
	live, err := kv.Get(context.Background(), orchestrator.PolicyKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.UpdateKey(context.Background(), e.js, contracts.BucketPolicy, orchestrator.PolicyKey, broken, live.Revision()); err != nil {
		t.Fatal(err)
	}
	// Then a good one: the store must skip the broken one and take this.
	apply(t, e, policyV2)
	nextChange(t, changes, "p2")
	if got := s.Current().Version(); got != "p2" {
		t.Fatalf("serving %q, want p2", got)
	}
}

func TestPendingRequestKeepsItsRuleWhenThePolicyChanges(t *testing.T) {
	e := setup(t)
	s, changes := openStore(t, e)
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: e.js, Policy: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	apply(t, e, policyV1)
	nextChange(t, changes, "p1")

	run := contracts.Run{ID: "run-keep", Agent: "billing"}
	call := orchestrator.ToolCall{ID: "c1", Name: "payments.send", Arguments: json.RawMessage(`{"amount":500}`)}
	v, err := gate.Submit(context.Background(), run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictPending || v[0].Rule != "payments" {
		t.Fatalf("under p1: %+v, want pending by payments", v[0])
	}
	rec := e.waitRecord(t, v[0].EventID, func(*contracts.Record) bool { return true })
	if rec.Request.Policy.Rule != "payments" || rec.Request.Policy.Version != "p1" || rec.Request.Risk != contracts.RiskHigh {
		t.Fatalf("request policy = %+v risk %s, want payments@p1 high", rec.Request.Policy, rec.Request.Risk)
	}

	apply(t, e, policyV2)
	nextChange(t, changes, "p2")
	// The policy decides first: under p2 the call is denied, even on a
	// re-review; the approval created under p1 keeps its p1 snapshot.
	v, err = gate.Submit(context.Background(), run, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictDenied || v[0].Rule != "no-payments" {
		t.Fatalf("re-review under p2: %+v, want denied by no-payments", v[0])
	}
	e.vote(t, rec.Request.EventID, "alice", contracts.DecisionApprove, "")
	done := e.waitRecord(t, rec.Request.EventID, func(r *contracts.Record) bool { return r.Status != contracts.StatusPending })
	if done.Status != contracts.StatusApproved || done.Request.Policy.Version != "p1" || done.Request.Policy.Rule != "payments" ||
		done.Request.Risk != contracts.RiskHigh {
		t.Fatalf("decided %s under %+v risk %s, want approved with the p1 snapshot", done.Status, done.Request.Policy, done.Request.Risk)
	}
	// A new call is decided by p2.
	v, err = gate.Submit(context.Background(), contracts.Run{ID: "run-new", Agent: "billing"}, []orchestrator.ToolCall{call})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictDenied || v[0].Reason != "Payments are frozen." {
		t.Fatalf("new call under p2: %+v, want denied", v[0])
	}
}

func TestConditionErrorGatesAndIsRecorded(t *testing.T) {
	e := setup(t)
	s, changes := openStore(t, e)
	gate, err := orchestrator.NewGate(context.Background(), orchestrator.Config{JS: e.js, Policy: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close() })
	apply(t, e, policyV1)
	nextChange(t, changes, "p1")
	// No amount: the allow rule's condition cannot be evaluated; the call must gate.
	v, err := gate.Submit(context.Background(), contracts.Run{ID: "run-err", Agent: "billing"},
		[]orchestrator.ToolCall{{ID: "c", Name: "payments.send", Arguments: json.RawMessage(`{"to":"acme"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Verdict != orchestrator.VerdictPending {
		t.Fatalf("verdict %+v, want pending: a failing condition must never allow", v[0])
	}
	rec := e.waitRecord(t, v[0].EventID, func(*contracts.Record) bool { return true })
	if rec.Request.Policy.Error == "" {
		t.Fatalf("request policy = %+v, want the condition error recorded", rec.Request.Policy)
	}
}

func policyBucket(t *testing.T, e *env) jetstream.KeyValue {
	t.Helper()
	kv, err := e.srv.JetStreamAs(embedded.RoleArbiter).KeyValue(context.Background(), contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func TestAppliedPolicyVersionsStayReadable(t *testing.T) {
	e := setup(t)
	kv := policyBucket(t, e)
	ctx := context.Background()
	first := apply(t, e, policyV1)
	apply(t, e, policyV2)
	for _, want := range []orchestrator.PolicyDocument{first.Document} {
		doc, err := orchestrator.ReadPolicyVersion(ctx, kv, want.Version)
		if err != nil {
			t.Fatalf("version %s after %s was applied: %v", want.Version, "p2", err)
		}
		if doc.SHA256 != want.SHA256 || doc.Source != policyV1 {
			t.Fatalf("version %s reads %+v, want the applied document", want.Version, doc)
		}
	}
	if doc, err := orchestrator.ReadPolicyVersion(ctx, kv, "p2"); err != nil || doc.Source != policyV2 {
		t.Fatalf("live version p2: %+v, %v", doc, err)
	}
	if _, err := orchestrator.ReadPolicyVersion(ctx, kv, "p3"); !errors.Is(err, orchestrator.ErrUnknownPolicyVersion) {
		t.Fatalf("a version never applied: %v, want ErrUnknownPolicyVersion", err)
	}
	// A version applied before cannot come back with other content, even
	// when it is no longer live, and the stored version is untouched.
	_, err := orchestrator.ApplyPolicy(ctx, e.js, []byte(policyV1+"\n# changed\n"), "admin", time.Now())
	if !errors.Is(err, orchestrator.ErrPolicyVersionExists) {
		t.Fatalf("re-applying p1 with other content: %v, want ErrPolicyVersionExists", err)
	}
	if doc, err := orchestrator.ReadPolicyVersion(ctx, kv, "p1"); err != nil || doc.Source != policyV1 {
		t.Fatalf("p1 after a refused re-apply: %+v, %v", doc, err)
	}
	// Rolling back to p1's content is a change of the live policy.
	if res := apply(t, e, policyV1); !res.Changed || res.Document.Version != "p1" {
		t.Fatalf("rolling back to p1: %+v", res)
	}
}

// TestPolicyVersionsWrittenByAnEarlierRelease: a bucket where only the live
// key holds policies (the versions' own keys did not exist yet) still gives
// every version its history holds, and the next apply gives the live one
// its own key.
func TestPolicyVersionsWrittenByAnEarlierRelease(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	admin := storedAsEarlierReleases(t, e.js, policyV1, policyV2)
	kv := policyBucket(t, e)
	for version, src := range map[string]string{"p1": policyV1, "p2": policyV2} {
		if doc, err := orchestrator.ReadPolicyVersion(ctx, kv, version); err != nil || doc.Source != src {
			t.Fatalf("version %s from the live key's history: %+v, %v", version, doc, err)
		}
	}
	apply(t, e, policyV3)
	if _, err := admin.Get(ctx, orchestrator.PolicyVersionKey("p2")); err != nil {
		t.Fatalf("the replaced live version p2 has no key of its own after an apply: %v", err)
	}
}

const policyV3 = `
version: "p3"
rules:
  - name: all
    tools: ["*"]
    action: require_approval
`

func TestPolicyVersionKey(t *testing.T) {
	seen := map[string]string{}
	for _, v := range []string{"p1", "2026-05-06.1", "sha-0123456789ab", "v 1", "v/1", "a..b", ".a", "ä", "=x", strings.Repeat("x", 200)} {
		k := orchestrator.PolicyVersionKey(v)
		if !strings.HasPrefix(k, orchestrator.PolicyVersionsPrefix) {
			t.Errorf("key %q of %q", k, v)
		}
		for _, c := range strings.TrimPrefix(k, orchestrator.PolicyVersionsPrefix) {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=", c) {
				t.Errorf("key %q of %q has %q, not valid in a bucket key", k, v, c)
			}
		}
		if other, dup := seen[k]; dup {
			t.Errorf("versions %q and %q share key %q", v, other, k)
		}
		seen[k] = v
	}
	if k := orchestrator.PolicyVersionKey("p1"); k != "versions.p1" {
		t.Errorf("key of p1 = %q, want versions.p1", k)
	}
}

// An attacker holding any credential names the live policy's key, or a
// policy version's key, as the reply of a JetStream request: the server
// publishes its answer there with its own rights. Before a policy is
// applied the answer is stored (the key holds nothing) and the apply
// replaces it; after, the bucket refuses it (a second message on a key is
// taken only as a roll-up), so the policy in force, the versions and the
// next apply are untouched.
func TestAnswersPublishedOnThePolicysKeysChangeNothing(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	kv := policyBucket(t, e)
	writer := e.srv.JetStreamAs(embedded.RoleAPI)
	current := "$KV." + contracts.BucketPolicy + "." + orchestrator.PolicyKey
	v1Key := "$KV." + contracts.BucketPolicy + "." + orchestrator.PolicyVersionKey("p1")
	// Before the first apply: an answer on each key that will hold p1.
	for _, key := range []string{orchestrator.PolicyKey, orchestrator.PolicyVersionKey("p1")} {
		e.srv.StoreAnswerOn(embedded.RoleOrchestrator, contracts.BucketPolicy, key)
	}
	junk, err := kv.Get(ctx, orchestrator.PolicyKey)
	if err != nil {
		t.Fatalf("the answer on the live key before any apply was not stored (%v): the test proves nothing", err)
	}
	t.Logf("stored on the live key before the first apply: %.60s", junk.Value())
	s, changes := openStore(t, e)
	res, err := orchestrator.ApplyPolicy(ctx, writer, []byte(policyV1), "admin", time.Now())
	if err != nil || !res.Changed {
		t.Fatalf("the first apply over the answers: %+v, %v", res, err)
	}
	nextChange(t, changes, "p1")
	if doc, err := orchestrator.ReadPolicyVersion(ctx, kv, "p1"); err != nil || doc.Source != policyV1 {
		t.Fatalf("version p1 after the apply: %+v, %v", doc, err)
	}
	v1, err := kv.Get(ctx, orchestrator.PolicyVersionKey("p1"))
	if err != nil {
		t.Fatal(err)
	}
	liveValue, err := kv.Get(ctx, orchestrator.PolicyKey)
	if err != nil || liveValue.Revision() != res.Revision {
		t.Fatalf("the live policy after the apply: %v", err)
	}
	// After: every credential's answers on the live key and p1's key.
	asked := 0
	for _, r := range embedded.Roles {
		if r == embedded.RoleAdmin {
			continue
		}
		for _, subject := range []string{current, v1Key} {
			if e.srv.AnswerOn(r, subject) {
				asked++
			}
		}
	}
	if asked == 0 {
		t.Fatal("no credential made a JetStream request: the test proves nothing")
	}
	// A write that expects each key's revision from before the answers,
	// queued in the stream behind them, fails if any answer was stored.
	for _, was := range []jetstream.KeyValueEntry{liveValue, v1} {
		if _, err := events.UpdateKey(ctx, writer, contracts.BucketPolicy, was.Key(), was.Value(), was.Revision()); err != nil {
			t.Fatalf("%s after %d answers: a write over its revision before them: %v", was.Key(), asked, err)
		}
	}
	nextChange(t, changes, "p1") // the live key written again
	if doc, err := orchestrator.ReadPolicyVersion(ctx, kv, "p1"); err != nil || doc.Source != policyV1 {
		t.Fatalf("version p1 after the answers: %+v, %v", doc, err)
	}
	if res, err := orchestrator.ApplyPolicy(ctx, writer, []byte(policyV2), "admin", time.Now()); err != nil || !res.Changed {
		t.Fatalf("the next apply: %+v, %v", res, err)
	}
	nextChange(t, changes, "p2")
	if got := s.Current().Version(); got != "p2" {
		t.Fatalf("serving %q, want p2", got)
	}
}

// A bucket provisioned by an earlier release kept the last 64 values of
// each key, and versions applied before they had keys of their own live
// only in the live key's history. Provisioning this release's bucket
// gives each of them its own key first, puts back the newest policy and
// directory where an answer the server published is newest, and then
// keeps one value a key.
func TestProvisionKeepsThePolicyVersionsOfAnEarlierReleasesBucket(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	admin := storedAsEarlierReleases(t, e.js, policyV1, policyV2)
	dir, _ := json.Marshal(contracts.Directory{Spec: contracts.SpecDirectory, Version: "d1", People: []contracts.DirectoryPerson{{ID: "alice"}}})
	if _, err := admin.Put(ctx, contracts.DirectoryKey, dir); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{orchestrator.PolicyKey, contracts.DirectoryKey} {
		e.srv.StoreAnswerOn(embedded.RoleResolver, contracts.BucketPolicy, key)
		if got, err := admin.Get(ctx, key); err != nil || bytes.Contains(got.Value(), []byte(`"spec"`)) {
			t.Fatalf("%s: the answer is not the newest value (%v): the test proves nothing", key, err)
		}
	}
	e.srv.Provision(e.js)

	st, err := e.js.Stream(ctx, "KV_"+contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxMsgsPerSubject != 1 || !c.DiscardNewPerSubject {
		t.Fatalf("the policy bucket after provisioning: %d values a key, discard new per subject %v", c.MaxMsgsPerSubject, c.DiscardNewPerSubject)
	}
	for version, src := range map[string]string{"p1": policyV1, "p2": policyV2} {
		e, err := admin.Get(ctx, orchestrator.PolicyVersionKey(version))
		if err != nil {
			t.Fatalf("version %s has no key of its own: %v", version, err)
		}
		var doc orchestrator.PolicyDocument
		if err := json.Unmarshal(e.Value(), &doc); err != nil || doc.Version != version || doc.Source != src {
			t.Fatalf("version %s's key holds %s (%v)", version, e.Value(), err)
		}
	}
	s, _ := openStore(t, e)
	if got := s.Current().Version(); got != "p2" {
		t.Fatalf("the live policy after provisioning: %q, want p2", got)
	}
	if got, err := admin.Get(ctx, contracts.DirectoryKey); err != nil || !bytes.Equal(got.Value(), dir) {
		t.Fatalf("the directory after provisioning: %v", err)
	}
	// Provisioning again changes nothing.
	e.srv.Provision(e.js)
	if res := apply(t, e, policyV3); !res.Changed {
		t.Fatalf("an apply after provisioning: %+v", res)
	}
}

// storedAsEarlierReleases configures js's policy bucket as releases before
// one value a key did and stores the policies (sources) there as releases
// before versions had keys of their own did: under the live key only, one
// after another. It returns the bucket, opened with js.
func storedAsEarlierReleases(t *testing.T, js jetstream.JetStream, sources ...string) jetstream.KeyValue {
	t.Helper()
	ctx := context.Background()
	eventstest.EarlierBucket(t, js, contracts.BucketPolicy, 64)
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range sources {
		p := countersigntest.Policy(t, src)
		value, _ := json.Marshal(orchestrator.PolicyDocument{Spec: orchestrator.SpecPolicyDocument, Version: p.Version(),
			SHA256: p.SHA256(), Source: src, AppliedBy: "admin", AppliedAt: time.Now().UTC()})
		if _, err := kv.Put(ctx, orchestrator.PolicyKey, value); err != nil {
			t.Fatal(err)
		}
	}
	return kv
}

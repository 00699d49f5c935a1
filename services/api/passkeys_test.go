package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/contracts/passkey/passkeytest"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

const stepUpPolicy = `
version: "su1"
default: deny
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: [alice, bob]
    quorum: 2
    step_up: passkey
  - name: email
    tools: ["email.*"]
    action: require_approval
    approvers: [alice, bob]
    step_up: passkey
  - name: plain
    tools: ["plain.*"]
    action: require_approval
    approvers: [alice, bob]
`

const (
	pkRP     = "inbox.example.com"
	pkOrigin = "https://inbox.example.com"
)

// clock is a settable clock for the API (it dates votes and statements).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// passkeyEnv is an API with passkeys on, a step-up policy, an arbiter that
// signs receipts, and the people alice, bob (named by the rules), carol
// (an approver the rules do not name) and an admin.
type passkeyEnv struct {
	*env
	api   *api.Server
	clock *clock
	keys  *receipt.KeySet
	runs  int
}

func setupPasskeys(t testing.TB) *passkeyEnv {
	t.Helper()
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	arbKey, _ := receipt.GenerateKey()
	apiKey, _ := receipt.GenerateKey()
	arbSigner, _ := receipt.NewSigner(receipt.SignerConfig{Key: arbKey})
	apiSigner, _ := receipt.NewSigner(receipt.SignerConfig{Key: apiKey})
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Receipts: arbSigner})
	policies := countersigntest.LivePolicy(t, srv.JetStreamAs(embedded.RoleAPI), stepUpPolicy)
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleAPI), policies)
	e := &passkeyEnv{env: &env{js: srv.JetStream(), tokens: map[string]string{}, srv: srv}, clock: &clock{t: time.Now()}}
	var tokens []api.Token
	for _, p := range []struct{ name, subject, role string }{
		{"agent", "agent:billing", api.RoleAgent}, {"alice", "alice", api.RoleApprover}, {"bob", "bob", api.RoleApprover},
		{"carol", "carol", api.RoleApprover}, {"admin", "root", api.RoleAdmin},
	} {
		tok, hash, _ := api.NewToken()
		e.tokens[p.name] = tok
		tokens = append(tokens, api.Token{Name: p.name, Subject: p.subject, SHA256: hash, Roles: []string{p.role}})
	}
	e.keys = receipt.NewKeySet(arbKey, apiKey)
	reg := prometheus.NewRegistry()
	cfg := api.Config{
		JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Policies: policies, Tokens: tokens, Registerer: reg, Gatherer: reg,
		ReceiptKeys: e.keys, Receipts: apiSigner, Now: e.clock.now,
		Passkeys: api.PasskeyConfig{RPID: pkRP, Origins: []string{pkOrigin}},
	}
	s, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	e.url, e.api = hs.URL, s
	return e
}

// principal is the API's principal of a test person.
func (e *passkeyEnv) principal(t testing.TB, name string) *api.Principal {
	t.Helper()
	p, ok := e.api.AuthenticateSum(sumOf(e.tokens[name]))
	if !ok {
		t.Fatalf("no principal for %s", name)
	}
	return &p
}

// enrol enrols a passkey for name through the enrolment ceremony.
func (e *passkeyEnv) enrol(t testing.TB, name string, a *passkeytest.Authenticator) contracts.Passkey {
	t.Helper()
	p := e.principal(t, name)
	options, id, aerr := e.api.BeginPasskeyEnrolment(context.Background(), p)
	if aerr != nil {
		t.Fatal(aerr)
	}
	resp, err := a.Register(options)
	if err != nil {
		t.Fatal(err)
	}
	pk, aerr := e.api.FinishPasskeyEnrolment(context.Background(), p, id, name+"'s laptop", resp)
	if aerr != nil {
		t.Fatalf("enrol %s: %s: %s", name, aerr.Code, aerr.Message)
	}
	return pk
}

// statement asks the API for the statement name signs to approve id.
func (e *passkeyEnv) statement(t testing.TB, name, id string) passkey.Statement {
	t.Helper()
	r := e.call(t, "POST", "/v1/approvals/"+id+"/statement", name, map[string]any{"decision": "approve"})
	if r.status != http.StatusOK {
		t.Fatalf("statement: %d %s", r.status, r.body)
	}
	var ans api.StatementAnswer
	r.decode(t, &ans)
	st, err := passkey.ParseStatement(ans.Statement)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Challenge != st.ChallengeB64() || ans.RPID != pkRP || ans.UserVerification != "required" {
		t.Fatalf("statement answer %+v", ans)
	}
	return st
}

func (e *passkeyEnv) pending(t testing.TB, tool, args string) string {
	t.Helper()
	e.runs++
	res := e.review(t, "", contracts.Run{ID: fmt.Sprintf("run-%d", e.runs), Agent: "billing-bot"}, toolCall{ID: "c1", Name: tool, Arguments: json.RawMessage(args)})
	if res[0].Verdict != orchestrator.VerdictPending {
		t.Fatalf("want pending, got %+v", res[0])
	}
	return res[0].EventID
}

func (e *passkeyEnv) signedVote(t *testing.T, name, id string, a *passkeytest.Authenticator) response {
	t.Helper()
	assertion := a.Sign(e.statement(t, name, id))
	return e.vote(t, name, id, map[string]any{"decision": "approve", "passkey": assertion})
}

func TestPasskeyApprovalRunsOnceAndItsReceiptCarriesBothSignatures(t *testing.T) {
	e := setupPasskeys(t)
	alice := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
	bob := passkeytest.NewEdDSA(pkRP, pkOrigin, []byte("bob"))
	e.enrol(t, "alice", alice)
	e.enrol(t, "bob", bob)
	id := e.pending(t, "payments.send", `{"amount":1250,"to":"Globex"}`)
	if r := e.signedVote(t, "alice", id, alice); r.status != http.StatusOK {
		t.Fatalf("alice: %d %s", r.status, r.body)
	}
	r := e.signedVote(t, "bob", id, bob)
	var ans recordAnswer
	r.decode(t, &ans)
	if r.status != http.StatusOK || ans.Record.Status != contracts.StatusApproved {
		t.Fatalf("bob: %d %s", r.status, r.body)
	}
	claim := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]any{"claim_id": "claim-1"})
	var claimed recordAnswer
	claim.decode(t, &claimed)
	if claim.status != http.StatusOK || claimed.Record.Claim == nil || claimed.Record.Claim.Receipt == "" {
		t.Fatalf("claim: %d %s", claim.status, claim.body)
	}
	tok := claimed.Record.Claim.Receipt
	fetcher, err := receipt.NewApproversFetcher(receipt.ApproversFetcherConfig{URL: e.url + "/.well-known/countersign-approvers", Keys: e.keys})
	if err != nil {
		t.Fatal(err)
	}
	humans := &receipt.Humans{Min: 2, Approvers: fetcher}
	args := []byte(`{"to":"Globex","amount":1250}`)
	c, err := receipt.Verify(context.Background(), tok, "payments.send", args, receipt.Options{Keys: e.keys, Humans: humans, Replay: receipt.NewMemoryReplayStore()})
	if err != nil {
		t.Fatalf("a receipt alice and bob signed: %v", err)
	}
	if c.StepUp != contracts.StepUpPasskey || len(c.Signatures) != 2 {
		t.Fatalf("claims %+v", c)
	}
	// The tool's replay store runs it once.
	store := receipt.NewMemoryReplayStore()
	opts := receipt.Options{Keys: e.keys, Humans: humans, Replay: store}
	if _, err := receipt.Verify(context.Background(), tok, "payments.send", args, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(context.Background(), tok, "payments.send", args, opts); receipt.Code(err) != "receipt_replayed" {
		t.Fatalf("second use: %v", err)
	}
}

func TestStepUpRefusesEveryApprovalItCannotProve(t *testing.T) {
	e := setupPasskeys(t)
	alice := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
	bob := passkeytest.NewEdDSA(pkRP, pkOrigin, []byte("bob"))
	carol := passkeytest.NewES256(pkRP, pkOrigin, []byte("carol"))
	alicePK := e.enrol(t, "alice", alice)
	e.enrol(t, "bob", bob)
	e.enrol(t, "carol", carol)
	other := e.pending(t, "email.send", `{"to":"a@example.com"}`)
	otherStatement := e.statement(t, "alice", other)

	type attempt struct {
		name, who string
		body      func(id string) map[string]any
		status    int
		code      string
	}
	approveWith := func(a contracts.PasskeyAssertion) map[string]any {
		return map[string]any{"decision": "approve", "passkey": a}
	}
	for _, c := range []attempt{
		{"no assertion", "alice", func(string) map[string]any { return map[string]any{"decision": "approve"} }, 403, contracts.ReasonStepUpRequired},
		{"an assertion for another request", "alice", func(string) map[string]any { return approveWith(alice.Sign(otherStatement)) }, 403, contracts.ReasonPasskeyMismatch},
		{"an assertion for other arguments", "alice", func(id string) map[string]any {
			st := e.statement(t, "alice", id)
			st.ArgumentsSHA256 = strings.Repeat("0", 64)
			return approveWith(alice.Sign(st))
		}, 403, contracts.ReasonPasskeyMismatch},
		{"an assertion for an edit cast as an approval", "alice", func(id string) map[string]any {
			st := e.statement(t, "alice", id)
			st.Decision, st.EditedArgumentsSHA256 = contracts.DecisionEdit, strings.Repeat("1", 64)
			return approveWith(alice.Sign(st))
		}, 403, contracts.ReasonPasskeyMismatch},
		{"bob's passkey over alice's statement", "alice", func(id string) map[string]any { return approveWith(bob.Sign(e.statement(t, "alice", id))) }, 403, contracts.ReasonPasskeyUnknown},
		{"alice's passkey under bob's token", "bob", func(id string) map[string]any { return approveWith(alice.Sign(e.statement(t, "alice", id))) }, 403, contracts.ReasonPasskeyUnknown},
		{"a passkey of another origin", "alice", func(id string) map[string]any {
			evil := passkeytest.NewES256(pkRP, "https://evil.example", []byte("alice"))
			return approveWith(evil.Sign(e.statement(t, "alice", id)))
		}, 403, contracts.ReasonPasskeyInvalid},
		{"a signature without user verification", "alice", func(id string) map[string]any {
			lazy := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
			lazy.Flags = 0x01
			return approveWith(lazy.Sign(e.statement(t, "alice", id)))
		}, 403, contracts.ReasonPasskeyInvalid},
		{"signed by a person the rule does not name", "carol", func(id string) map[string]any {
			// carol may not read the request, so she gets no statement:
			// she makes her own.
			st := e.statement(t, "alice", id)
			st.Approver = "carol"
			return approveWith(carol.Sign(st))
		}, 404, api.CodeUnknownEvent},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := e.pending(t, "email.send", `{"to":"b@example.com"}`)
			r := e.vote(t, c.who, id, c.body(id))
			r.wantError(t, c.status, c.code, "")
			got := e.call(t, "GET", "/v1/approvals/"+id, "admin", nil)
			var rec recordAnswer
			got.decode(t, &rec)
			refused := 1
			if c.code == api.CodeUnknownEvent { // never sent: who may not read a request cannot vote on it
				refused = 0
			}
			if rec.Record.Status != contracts.StatusPending || len(rec.Record.RefusedVotes) != refused || refused == 1 && rec.Record.RefusedVotes[0].Reason != c.code {
				t.Fatalf("record after the refusal: %s", got.body)
			}
		})
	}

	t.Run("a statement older than five minutes", func(t *testing.T) {
		id := e.pending(t, "email.send", `{"to":"c@example.com"}`)
		a := alice.Sign(e.statement(t, "alice", id))
		e.clock.add(passkey.MaxAge + time.Second)
		e.vote(t, "alice", id, approveWith(a)).wantError(t, 403, contracts.ReasonPasskeyStale, "")
	})
	t.Run("a replayed assertion", func(t *testing.T) {
		id := e.pending(t, "email.send", `{"to":"d@example.com"}`)
		a := alice.Sign(e.statement(t, "alice", id))
		if r := e.vote(t, "bob", id, map[string]any{"decision": "reject", "comment": "no"}); r.status != http.StatusOK {
			t.Fatalf("bob's rejection needs no passkey: %d %s", r.status, r.body)
		}
		e.vote(t, "alice", id, approveWith(a)).wantError(t, 409, contracts.ReasonClosed, "")
		next := e.pending(t, "email.send", `{"to":"d@example.com"}`)
		e.vote(t, "alice", next, approveWith(a)).wantError(t, 403, contracts.ReasonPasskeyMismatch, "")
	})
	t.Run("a revoked passkey stops counting at once", func(t *testing.T) {
		id := e.pending(t, "email.send", `{"to":"e@example.com"}`)
		a := alice.Sign(e.statement(t, "alice", id))
		if r := e.call(t, "POST", "/v1/passkeys/"+alicePK.ID+"/revoke", "alice", nil); r.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", r.status, r.body)
		}
		e.vote(t, "alice", id, approveWith(a)).wantError(t, 403, contracts.ReasonPasskeyUnknown, "")
	})
}

func TestPasskeyEnrolmentIsTheEnrollersAndOnce(t *testing.T) {
	e := setupPasskeys(t)
	ctx := context.Background()
	alice, bob := e.principal(t, "alice"), e.principal(t, "bob")
	a := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
	options, id, aerr := e.api.BeginPasskeyEnrolment(ctx, alice)
	if aerr != nil {
		t.Fatal(aerr)
	}
	resp, _ := a.Register(options)
	if _, aerr := e.api.FinishPasskeyEnrolment(ctx, bob, id, "stolen", resp); aerr == nil || aerr.Code != api.CodeEnrolmentExpired {
		t.Fatalf("bob finishing alice's enrolment: %v", aerr)
	}
	// The enrolment was used up by bob's attempt: alice starts again.
	if _, aerr := e.api.FinishPasskeyEnrolment(ctx, alice, id, "laptop", resp); aerr == nil || aerr.Code != api.CodeEnrolmentExpired {
		t.Fatalf("a used enrolment: %v", aerr)
	}
	options, id, _ = e.api.BeginPasskeyEnrolment(ctx, alice)
	evil := passkeytest.NewES256(pkRP, "https://evil.example", []byte("alice"))
	resp, _ = evil.Register(options)
	if _, aerr := e.api.FinishPasskeyEnrolment(ctx, alice, id, "laptop", resp); aerr == nil || aerr.Code != api.CodeEnrolmentInvalid {
		t.Fatalf("an answer from another origin: %v", aerr)
	}
	pk := e.enrol(t, "alice", a)
	if pk.PublicKey != a.JWK() {
		t.Fatalf("stored key %+v, authenticator's %+v", pk.PublicKey, a.JWK())
	}
	// The same authenticator is excluded from a second enrolment.
	options, _, _ = e.api.BeginPasskeyEnrolment(ctx, alice)
	if !strings.Contains(string(options), pk.ID) {
		t.Fatalf("options do not exclude the enrolled passkey: %s", options)
	}
	// bob neither reads nor revokes alice's passkeys; an admin does both.
	e.call(t, "GET", "/v1/passkeys?person=alice", "bob", nil).wantError(t, 403, api.CodeForbidden, "person")
	e.call(t, "POST", "/v1/passkeys/"+pk.ID+"/revoke", "bob", nil).wantError(t, 404, api.CodeUnknownPasskey, "")
	r := e.call(t, "POST", "/v1/passkeys/"+pk.ID+"/revoke?person=alice", "admin", nil)
	var revoked contracts.Passkey
	r.decode(t, &revoked)
	if r.status != http.StatusOK || !revoked.Revoked() || revoked.RevokedBy != "root" {
		t.Fatalf("admin revoke: %d %s", r.status, r.body)
	}
	// The approvers document still lists it, revoked.
	doc := e.call(t, "GET", "/.well-known/countersign-approvers", "", nil)
	d, err := receipt.ParseApprovers(ctx, string(doc.body), e.keys, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k, ok := d.Key(pk.ID)
	if !ok || k.Person != "alice" || k.RevokedAt == nil || d.RPID != pkRP {
		t.Fatalf("approvers document: %s", doc.body)
	}
}

func sumOf(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// A credential that may send any JetStream request can have the NATS
// server publish its answer on a person's passkeys key (or the relying
// party's): the reply subject names the key. Before the person enrols
// the key holds nothing and the answer is stored, and the enrolment
// replaces it; after, the bucket refuses it. The person's enrolled
// passkey still signs approvals the arbiter counts, it is still theirs on
// the API and in the approvers document.
func TestJunkTheServerStoredUnderPasskeyKeysChangesNoPasskey(t *testing.T) {
	e := setupPasskeys(t)
	ctx := context.Background()
	alice := passkeytest.NewES256(pkRP, pkOrigin, []byte("alice"))
	kv, err := e.js.KeyValue(ctx, contracts.BucketPasskeys)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.StoreAnswerOn(embedded.RoleOrchestrator, contracts.BucketPasskeys, passkey.KeyName("alice"))
	first := e.enrol(t, "alice", alice)
	var before []jetstream.KeyValueEntry
	for _, key := range []string{passkey.KeyName("alice"), contracts.PasskeyPartyKey} {
		was, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, was)
		e.srv.AnswerOn(embedded.RoleOrchestrator, "$KV."+contracts.BucketPasskeys+"."+key)
	}
	// A write over each key's revision from before the answers, queued
	// behind them, fails if any was stored.
	for _, was := range before {
		if _, err := events.UpdateKey(ctx, e.js, contracts.BucketPasskeys, was.Key(), was.Value(), was.Revision()); err != nil {
			t.Fatalf("%s: a write over its revision before the answers: %v", was.Key(), err)
		}
	}

	id := e.pending(t, "payments.send", `{"amount":1250,"to":"Globex"}`)
	if r := e.signedVote(t, "alice", id, alice); r.status != http.StatusOK {
		t.Fatalf("alice's signed approval over junk: %d %s", r.status, r.body)
	}
	var mine struct {
		Passkeys []contracts.Passkey `json:"passkeys"`
	}
	r := e.call(t, "GET", "/v1/passkeys", "alice", nil)
	if r.decode(t, &mine); r.status != http.StatusOK || len(mine.Passkeys) != 1 || mine.Passkeys[0].ID != first.ID {
		t.Fatalf("alice's passkeys over junk: %d %s", r.status, r.body)
	}
	second := e.enrol(t, "alice", passkeytest.NewEdDSA(pkRP, pkOrigin, []byte("alice-phone")))
	doc := e.call(t, "GET", "/.well-known/countersign-approvers", "", nil)
	d, err := receipt.ParseApprovers(ctx, string(doc.body), e.keys, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range []contracts.Passkey{first, second} {
		if k, ok := d.Key(pk.ID); !ok || k.Person != "alice" || k.RevokedAt != nil {
			t.Fatalf("approvers document after enrolling over junk, %s: %s", pk.ID, doc.body)
		}
	}

	// A passkeys value of a version this release cannot read is alice's
	// all the same: it is not skipped for the older one it may revoke
	// from. Her passkeys cannot be read, and her signed approval is
	// refused.
	id = e.pending(t, "payments.send", `{"amount":1300,"to":"Globex"}`)
	assertion := alice.Sign(e.statement(t, "alice", id))
	cur, err := kv.Get(ctx, passkey.KeyName("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.UpdateKey(ctx, e.js, contracts.BucketPasskeys, passkey.KeyName("alice"),
		[]byte(`{"spec":"countersign.passkeys/v2","person":"alice","keys":{}}`), cur.Revision()); err != nil {
		t.Fatal(err)
	}
	if r := e.call(t, "GET", "/v1/passkeys", "alice", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("alice's passkeys under a newer version: %d %s, want 500", r.status, r.body)
	}
	r = e.vote(t, "alice", id, map[string]any{"decision": "approve", "passkey": assertion})
	r.wantError(t, http.StatusForbidden, contracts.ReasonPasskeyUnknown, "")
}

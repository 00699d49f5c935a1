package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/countersigntest"
)

// receiptEnv is an API whose arbiter signs receipts with key and which
// publishes the key at /.well-known/jwks.json.
type receiptEnv struct {
	srv    *eventstest.Server
	url    string
	key    receipt.PrivateKey
	agent  *client.Client
	alice  *client.Client
	client *http.Client
	// apiKey signs what the API signs (policy and grant receipts).
	apiKey     receipt.PrivateKey
	aliceToken string
	// gate is the API's gate (its grant book).
	gate *orchestrator.Gate
}

func setupReceipts(t *testing.T, opts ...eventstest.Option) *receiptEnv {
	t.Helper()
	return setupReceiptsWith(t, testPolicy, true, opts...)
}

// setupReceiptsWith is setupReceipts with another policy; with apiSigns the
// API holds a signing key of its own (receipts.policy_keys), as in a cluster.
func setupReceiptsWith(t *testing.T, pol string, apiSigns bool, opts ...eventstest.Option) *receiptEnv {
	t.Helper()
	srv := eventstest.NewServer(t, opts...)
	srv.Provision(srv.JetStream())
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.NewSigner(receipt.SignerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	countersigntest.RunArbiter(t, arbiter.Config{JS: srv.JetStreamAs(embedded.RoleArbiter), Receipts: signer})
	policies := countersigntest.LivePolicy(t, srv.JetStreamAs(embedded.RoleAPI), pol)
	gate := countersigntest.Gate(t, srv.JetStreamAs(embedded.RoleAPI), policies)
	agentTok, agentHash, _ := api.NewToken()
	aliceTok, aliceHash, _ := api.NewToken()
	reg := prometheus.NewRegistry()
	cfg := api.Config{
		JS: srv.JetStreamAs(embedded.RoleAPI), Gate: gate, Policies: policies, Registerer: reg, Gatherer: reg,
		Tokens: []api.Token{
			{Name: "agent", Subject: "agent:billing", SHA256: agentHash, Roles: []string{api.RoleAgent}},
			{Name: "alice", Subject: "alice", SHA256: aliceHash, Roles: []string{api.RoleApprover}},
		},
		// The API holds only the public half of the arbiter's key.
		ReceiptKeys: receipt.NewKeySet(key),
	}
	e := &receiptEnv{srv: srv, key: key, aliceToken: aliceTok, gate: gate}
	if apiSigns {
		if e.apiKey, err = receipt.GenerateKey(); err != nil {
			t.Fatal(err)
		}
		if cfg.Receipts, err = receipt.NewSigner(receipt.SignerConfig{Key: e.apiKey}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	e.url, e.client = hs.URL, hs.Client()
	e.agent, e.alice = goClient(t, hs.URL, agentTok), goClient(t, hs.URL, aliceTok)
	return e
}

// approvedCall reviews a payments call, has alice approve it and returns its event id.
func (e *receiptEnv) approvedCall(t *testing.T, ctx context.Context, runID string, args json.RawMessage) string {
	t.Helper()
	res, err := e.agent.Review(ctx, contracts.Run{ID: runID, Agent: "billing-bot", RequestedBy: "carol", Tenant: "acme"},
		[]client.ToolCall{{ID: "pay", Name: "payments.send", Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.alice.Decide(ctx, res[0].EventID, client.Vote{Decision: contracts.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	return res[0].EventID
}

// TestClaimAnswerCarriesAReceiptToolsVerify: the claim answer carries the
// receipt; a tool that fetches the API's JWKS verifies it for the exact
// call, once; a retried claim returns the same receipt.
func TestClaimAnswerCarriesAReceiptToolsVerify(t *testing.T) {
	e := setupReceipts(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := json.RawMessage(`{"amount":1250,"currency":"EUR","recipient":"Globex GmbH"}`)
	id := e.approvedCall(t, ctx, "receipt-1", args)
	claimID := client.NewClaimID()
	rec, err := e.agent.Claim(ctx, id, claimID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Claim == nil || rec.Claim.Receipt == "" {
		t.Fatalf("claim answer without a receipt: %+v", rec.Claim)
	}
	again, err := e.agent.Claim(ctx, id, claimID)
	if err != nil || again.Claim.Receipt != rec.Claim.Receipt {
		t.Fatalf("a retried claim returned another receipt (%v)", err)
	}

	resp, err := e.client.Get(e.url + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") == "" || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		t.Fatalf("GET /.well-known/jwks.json: %d %v", resp.StatusCode, resp.Header)
	}
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: e.url + "/.well-known/jwks.json", Client: e.client})
	if err != nil {
		t.Fatal(err)
	}
	opts := receipt.Options{Keys: keys, Replay: receipt.NewMemoryReplayStore()}
	c, err := receipt.Verify(ctx, rec.Claim.Receipt, "payments.send", []byte(`{"recipient":"Globex GmbH","currency":"EUR","amount":1250}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.EventID != id || c.ClaimID != claimID || c.Tenant != "acme" || c.Rule != "payments" || c.PolicyVersion != "t1" || len(c.DecidedBy) != 1 || c.DecidedBy[0] != "alice" {
		t.Fatalf("claims %+v", c)
	}
	if _, err := receipt.Verify(ctx, rec.Claim.Receipt, "payments.send", args, opts); !errors.Is(err, receipt.ErrReplayed) {
		t.Fatalf("second use: %v, want ErrReplayed", err)
	}
}

// TestRolesWithoutSigningKeyCannotMintReceipts: a process holding the
// orchestrator's or a resolver's NATS credential holds no signing key. A
// receipt it signs with a key of its own names a key the tool does not
// know; one it alters no longer verifies; it cannot write a receipt into a
// record; and a claim it sends for an approval nobody approved gets none.
func TestRolesWithoutSigningKeyCannotMintReceipts(t *testing.T) {
	e := setupReceipts(t, eventstest.AllowViolations())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := json.RawMessage(`{"amount":5}`)
	id := e.approvedCall(t, ctx, "receipt-2", args)
	rec, err := e.agent.Claim(ctx, id, client.NewClaimID())
	if err != nil {
		t.Fatal(err)
	}
	tool := receipt.Options{Keys: receipt.NewKeySet(e.key), Replay: receipt.NewMemoryReplayStore()}

	own, _ := receipt.GenerateKey()
	forger, _ := receipt.NewSigner(receipt.SignerConfig{Key: own})
	sha, _ := contracts.ArgumentsSHA256([]byte(`{"amount":5000}`))
	forged, err := forger.Sign(receipt.Claims{Agent: "billing-bot", Tool: "payments.send", ArgsSHA256: sha, Basis: receipt.BasisApproval, DecidedBy: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(ctx, forged, "payments.send", []byte(`{"amount":5000}`), tool); !errors.Is(err, receipt.ErrUnknownKey) {
		t.Fatalf("self-signed receipt: %v, want ErrUnknownKey", err)
	}
	// The same under the arbiter's kid: the signature fails.
	parts := strings.Split(forged, ".")
	hdr, _ := json.Marshal(map[string]string{"alg": receipt.Algorithm, "typ": receipt.Type, "kid": e.key.ID})
	sameKid := b64url(hdr) + "." + parts[1] + "." + parts[2]
	if _, err := receipt.Verify(ctx, sameKid, "payments.send", []byte(`{"amount":5000}`), tool); !errors.Is(err, receipt.ErrBadSignature) {
		t.Fatalf("receipt under the arbiter's kid: %v, want ErrBadSignature", err)
	}

	for _, role := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleResolver} {
		js := e.srv.JetStreamAs(role)
		kv, err := js.KeyValue(ctx, contracts.BucketApprovals)
		if err != nil {
			t.Fatal(err)
		}
		entry, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var r contracts.Record
		if err := contracts.Decode(entry.Value(), &r); err != nil {
			t.Fatal(err)
		}
		r.Claim.Receipt = forged
		data, _ := contracts.Marshal(r)
		// The server drops the write (a permissions violation): no answer comes.
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = kv.Update(wctx, id, data, entry.Revision())
		wcancel()
		if err == nil {
			t.Fatalf("%s wrote a receipt into the record", role)
		}
	}
	if got, _, err := e.agent.Approval(ctx, id, 0); err != nil || got.Claim.Receipt != rec.Claim.Receipt {
		t.Fatalf("the record's receipt changed (%v)", err)
	}
	if len(e.srv.Violations()) == 0 {
		t.Fatal("the server logged no refused write")
	}

	// A claim of an approval that is still pending: refused, no receipt.
	res, err := e.agent.Review(ctx, contracts.Run{ID: "receipt-3", Agent: "billing-bot", RequestedBy: "carol"},
		[]client.ToolCall{{ID: "pay", Name: "payments.send", Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.Claim(ctx, res[0].EventID, client.NewClaimID()); !errors.Is(err, client.ErrNotApproved) {
		t.Fatalf("claim of a pending approval: %v", err)
	}
	pending, _, err := e.agent.Approval(ctx, res[0].EventID, 0)
	if err != nil || pending.Claim != nil {
		t.Fatalf("pending approval claimed: %+v %v", pending.Claim, err)
	}
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

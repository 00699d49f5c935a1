package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
)

// quorumPolicy gates payments on two distinct approvers of finance, a group
// the approver directory defines.
const quorumPolicy = `version: "quorum-e2e-1"
default: require_approval
rules:
  - name: payments
    tools: ["payments.*"]
    action: require_approval
    approvers: ["group:finance"]
    quorum: 2
`

// quorumRig is a serve process with a directory of three finance approvers
// and an agent, and the quorum policy applied with the CLI.
type quorumRig struct {
	t      *testing.T
	p      *serveProc
	tokens map[string]string // user id → bearer token
}

func newQuorumRig(t *testing.T) *quorumRig {
	t.Helper()
	dir := t.TempDir()
	dirFile, polFile := filepath.Join(dir, "directory.yaml"), filepath.Join(dir, "quorum.yaml")
	r := &quorumRig{t: t, tokens: map[string]string{}}
	var b strings.Builder
	b.WriteString("groups:\n  finance: {description: Approve payments}\nusers:\n")
	for _, u := range []struct{ id, groups, roles string }{
		{"alice", "[finance]", "[approver]"},
		{"bob", "[finance]", "[approver]"},
		{"carol", "[finance]", "[approver]"},
		{"dave", "[]", "[agent]"},
	} {
		raw := make([]byte, 24)
		_, _ = rand.Read(raw)
		tok := "cs_" + hex.EncodeToString(raw)
		sum := sha256.Sum256([]byte(tok))
		r.tokens[u.id] = tok
		fmt.Fprintf(&b, "  - id: %s\n    groups: %s\n    tokens: [{name: %s, sha256: %s, roles: %s}]\n",
			u.id, u.groups, u.id, hex.EncodeToString(sum[:]), u.roles)
	}
	if err := os.WriteFile(dirFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(polFile, []byte(quorumPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	r.p = startServe(t, t.TempDir(), "--directory", dirFile)
	if out, err := r.p.cli("policy", "apply", polFile); err != nil || !strings.Contains(out, "Applied policy version quorum-e2e-1") {
		t.Fatalf("policy apply: %v\n%s", err, out)
	}
	return r
}

// do sends a JSON request as token's owner and decodes the answer into out.
// It is safe to call from any goroutine: it reports errors, never fails t.
func (r *quorumRig) do(ctx context.Context, token, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.p.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode, nil
}

// must is do for the test goroutine.
func (r *quorumRig) must(token, method, path string, body, out any) int {
	r.t.Helper()
	code, err := r.do(context.Background(), token, method, path, body, out)
	if err != nil {
		r.t.Fatal(err)
	}
	return code
}

// cliAs runs the CLI with user's token. The race runtime's 1 s pause at
// exit is turned off: the CLI is a short-lived client here.
func (r *quorumRig) cliAs(user string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+r.p.url, "COUNTERSIGN_TOKEN="+r.tokens[user], "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func paymentReview(runID, requestedBy string) map[string]any {
	return map[string]any{
		"run": map[string]any{"id": runID, "agent": "billing-bot", "requested_by": requestedBy},
		"tool_calls": []map[string]any{{"id": "pay", "name": "payments.send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}}},
	}
}

// propose sends the review as dave (the agent) and returns the event id of
// the pending payment. Without ?wait the API answers once the record exists.
func (r *quorumRig) propose(runID, requestedBy string) string {
	r.t.Helper()
	var ans reviewAnswer
	if code := r.must(r.tokens["dave"], "POST", "/v1/reviews", paymentReview(runID, requestedBy), &ans); code != 200 ||
		len(ans.Results) != 1 || ans.Results[0].Verdict != "pending" || ans.Results[0].Rule != "payments" {
		r.t.Fatalf("review: %d %+v", code, ans)
	}
	id := ans.Results[0].EventID
	rec := r.record(id)
	if rec.Request.Quorum.Required != 2 || !slices.Equal(rec.Request.Quorum.Approvers, []string{"alice", "bob", "carol"}) {
		r.t.Fatalf("quorum snapshot %+v, want 2 of [alice bob carol]", rec.Request.Quorum)
	}
	return id
}

// waitingReview starts `POST /v1/reviews?wait=30s` for the same call and
// returns once the request is written to the server; the channel delivers
// the verdict.
func (r *quorumRig) waitingReview(runID, requestedBy string) <-chan reviewAnswer {
	r.t.Helper()
	wrote := make(chan struct{})
	done := make(chan reviewAnswer, 1)
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) },
	})
	go func() {
		var ans reviewAnswer
		if code, err := r.do(ctx, r.tokens["dave"], "POST", "/v1/reviews?wait=30s", paymentReview(runID, requestedBy), &ans); err != nil || code != 200 {
			r.t.Errorf("waiting review: %d %v", code, err)
		}
		done <- ans
	}()
	select {
	case <-wrote:
	case ans := <-done:
		r.t.Fatalf("the waiting review ended before it was sent: %+v", ans)
	}
	return done
}

func (r *quorumRig) verdict(ch <-chan reviewAnswer) (verdict, reason string) {
	r.t.Helper()
	select {
	case ans := <-ch:
		if len(ans.Results) != 1 {
			r.t.Fatalf("waiting review: %+v", ans)
		}
		return ans.Results[0].Verdict, ans.Results[0].Reason
	case <-time.After(45 * time.Second):
		r.t.Fatal("the waiting review did not return")
	}
	return "", ""
}

type quorumRecord struct {
	Record   contracts.Record `json:"record"`
	Revision uint64           `json:"revision"`
}

func (r *quorumRig) record(id string) contracts.Record {
	r.t.Helper()
	var rec quorumRecord
	if code := r.must(r.tokens["alice"], "GET", "/v1/approvals/"+id, nil, &rec); code != 200 {
		r.t.Fatalf("GET %s: %d", id, code)
	}
	return rec.Record
}

type apiRefusal struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// vote casts decision over HTTP as user and returns the status code and,
// on 200, the record.
func (r *quorumRig) vote(user, id, decision, comment string) (int, contracts.Record, apiRefusal) {
	r.t.Helper()
	body := map[string]any{"decision": decision}
	if comment != "" {
		body["comment"] = comment
	}
	var raw json.RawMessage
	code := r.must(r.tokens[user], "POST", "/v1/approvals/"+id+"/votes", body, &raw)
	var rec quorumRecord
	var ref apiRefusal
	_ = json.Unmarshal(raw, &rec)
	_ = json.Unmarshal(raw, &ref)
	return code, rec.Record, ref
}

func voters(rec contracts.Record) []string {
	var ids []string
	for _, v := range rec.Votes {
		ids = append(ids, v.Decision+":"+v.Approver.ID+"/"+v.Approver.Via)
	}
	slices.Sort(ids)
	return ids
}

// TestQuorumTwoOfThreeAcrossSurfaces: alice votes over HTTP and bob as a raw
// NATS publish with the resolver credentials, at the same moment. The
// payment is approved once, by both, and the waiting agent is released.
func TestQuorumTwoOfThreeAcrossSurfaces(t *testing.T) {
	t.Parallel()
	r := newQuorumRig(t)

	var creds struct{ URL, User, Password string }
	b, err := os.ReadFile(filepath.Join(r.p.data, "resolver.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &creds); err != nil || creds.URL == "" || creds.User == "" {
		t.Fatalf("resolver.json: %v %s", err, b)
	}
	nc, err := nats.Connect(creds.URL, nats.UserInfo(creds.User, creds.Password), embedded.InboxOptionFor(creds.User))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	id := r.propose("run-quorum", "dave")
	wait := r.waitingReview("run-quorum", "dave")

	start := make(chan struct{})
	type result struct {
		who  string
		code int
		err  error
	}
	results := make(chan result, 2)
	go func() { // alice, over HTTP
		<-start
		code, err := r.do(context.Background(), r.tokens["alice"], "POST", "/v1/approvals/"+id+"/votes",
			map[string]any{"decision": "approve", "comment": "invoice checked"}, nil)
		results <- result{"alice", code, err}
	}()
	go func() { // bob, straight on the bus
		<-start
		voteID := uuid.NewString()
		v := contracts.Vote{Spec: contracts.SpecVote, VoteID: voteID, EventID: id, Decision: contracts.DecisionApprove,
			Approver: contracts.Approver{ID: "bob", Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC()}
		data, _ := json.Marshal(v)
		msg := nats.NewMsg(contracts.ResolvedSubject(id))
		msg.Header.Set(jetstream.MsgIDHeader, voteID)
		msg.Data = data
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := js.PublishMsg(ctx, msg)
		results <- result{"bob", 0, err}
	}()
	close(start)
	for range 2 {
		res := <-results
		if res.err != nil {
			t.Fatalf("%s's vote: %v", res.who, res.err)
		}
		// alice's vote is counted (200) or, at worst, still in flight (202).
		if res.who == "alice" && res.code != 200 && res.code != 202 {
			t.Fatalf("alice's vote: %d", res.code)
		}
	}

	if v, reason := r.verdict(wait); v != "allowed" {
		t.Fatalf("waiting review: %s %q, want allowed", v, reason)
	}
	var final quorumRecord
	r.must(r.tokens["carol"], "GET", "/v1/approvals/"+id+"?wait=30s", nil, &final)
	rec := final.Record
	if rec.Status != contracts.StatusApproved || rec.Outcome == nil {
		t.Fatalf("status %s, outcome %+v", rec.Status, rec.Outcome)
	}
	decidedBy := slices.Sorted(slices.Values(rec.Outcome.DecidedBy))
	if !slices.Equal(decidedBy, []string{"alice", "bob"}) {
		t.Fatalf("decided_by %v, want alice and bob", rec.Outcome.DecidedBy)
	}
	if got := voters(rec); !slices.Equal(got, []string{"approve:alice/api", "approve:bob/nats"}) {
		t.Fatalf("votes %v", got)
	}
	if len(rec.RefusedVotes) != 0 {
		t.Fatalf("refused votes %+v", rec.RefusedVotes)
	}
	// Exactly one decision on the event stream.
	var tl struct {
		Events []struct{ Kind string } `json:"events"`
	}
	r.must(r.tokens["alice"], "GET", "/v1/approvals/"+id+"/events", nil, &tl)
	decided := 0
	for _, e := range tl.Events {
		if e.Kind == "decided" {
			decided++
		}
	}
	if decided != 1 {
		t.Fatalf("%d decided events, want 1: %+v", decided, tl.Events)
	}
	// A third approval comes too late.
	if code, _, ref := r.vote("carol", id, "approve", ""); code != 409 || ref.Error.Code != contracts.ReasonClosed {
		t.Fatalf("carol's late vote: %d %+v", code, ref.Error)
	}
}

// TestQuorumVeto: one approval, then a rejection: rejected at once, and the
// waiting agent gets the reason.
func TestQuorumVeto(t *testing.T) {
	t.Parallel()
	r := newQuorumRig(t)
	id := r.propose("run-veto", "dave")
	wait := r.waitingReview("run-veto", "dave")

	if code, rec, _ := r.vote("alice", id, "approve", ""); code != 200 || rec.Status != contracts.StatusPending {
		t.Fatalf("alice: %d %s", code, rec.Status)
	}
	code, rec, _ := r.vote("carol", id, "reject", "wrong account")
	if code != 200 || rec.Status != contracts.StatusRejected || rec.Outcome == nil ||
		!slices.Equal(rec.Outcome.DecidedBy, []string{"carol"}) || rec.Outcome.Comment != "wrong account" {
		t.Fatalf("carol's veto: %d %s %+v", code, rec.Status, rec.Outcome)
	}
	v, reason := r.verdict(wait)
	if v != "denied" || !strings.Contains(reason, "wrong account") {
		t.Fatalf("waiting review: %s %q, want denied with the reason", v, reason)
	}
	if code, _, ref := r.vote("bob", id, "approve", ""); code != 409 || ref.Error.Code != contracts.ReasonClosed {
		t.Fatalf("bob's vote after the veto: %d %+v", code, ref.Error)
	}
}

// TestQuorumSelfApproval: alice asked for the payment, so her approval is
// refused; bob and carol decide it.
func TestQuorumSelfApproval(t *testing.T) {
	t.Parallel()
	r := newQuorumRig(t)
	id := r.propose("run-self", "alice")
	wait := r.waitingReview("run-self", "alice")

	code, _, ref := r.vote("alice", id, "approve", "")
	if code != 403 || ref.Error.Code != contracts.ReasonSelfApproval {
		t.Fatalf("alice approving her own request: %d %+v", code, ref.Error)
	}
	rec := r.record(id)
	if rec.Status != contracts.StatusPending || len(rec.Votes) != 0 || len(rec.RefusedVotes) != 1 ||
		rec.RefusedVotes[0].Approver.ID != "alice" || rec.RefusedVotes[0].Reason != contracts.ReasonSelfApproval {
		t.Fatalf("after alice's refused vote: %s votes %v refused %+v", rec.Status, voters(rec), rec.RefusedVotes)
	}
	if code, rec, _ := r.vote("bob", id, "approve", ""); code != 200 || rec.Status != contracts.StatusPending {
		t.Fatalf("bob: %d %s (alice's refused vote must not count)", code, rec.Status)
	}
	code, rec, _ = r.vote("carol", id, "approve", "")
	if code != 200 || rec.Status != contracts.StatusApproved ||
		!slices.Equal(slices.Sorted(slices.Values(rec.Outcome.DecidedBy)), []string{"bob", "carol"}) {
		t.Fatalf("carol: %d %s %+v", code, rec.Status, rec.Outcome)
	}
	if v, reason := r.verdict(wait); v != "allowed" {
		t.Fatalf("waiting review: %s %q", v, reason)
	}
}

// TestQuorumProgress: after one of two approvals the API and the CLI show
// the progress; the CLI's second approval decides.
func TestQuorumProgress(t *testing.T) {
	t.Parallel()
	r := newQuorumRig(t)
	id := r.propose("run-progress", "dave")

	out, err := r.cliAs("alice", "approvals", "approve", id, "--comment", "invoice checked")
	if err != nil || !strings.Contains(out, "Vote counted: approve "+id+". Status is now pending.") {
		t.Fatalf("alice's CLI approval: %v\n%s", err, out)
	}
	rec := r.record(id)
	if rec.Status != contracts.StatusPending || !slices.Equal(voters(rec), []string{"approve:alice/cli"}) {
		t.Fatalf("after one approval: %s %v", rec.Status, voters(rec))
	}
	out, err = r.cliAs("bob", "approvals", "show", id)
	if err != nil || !strings.Contains(out, "  Quorum:    1 of 2 (alice, bob, carol)\n") ||
		!strings.Contains(out, "  Vote:      approve by alice via cli invoice checked\n") {
		t.Fatalf("show after one approval: %v\n%s", err, out)
	}

	out, err = r.cliAs("bob", "approvals", "approve", id)
	if err != nil || !strings.Contains(out, "Status is now approved.") {
		t.Fatalf("bob's CLI approval: %v\n%s", err, out)
	}
	out, err = r.cliAs("carol", "approvals", "show", id)
	if err != nil || !strings.Contains(out, "  Status:    approved\n") || !strings.Contains(out, "  Quorum:    2 of 2 (alice, bob, carol)\n") ||
		!strings.Contains(out, "  Outcome:   approve by alice, bob") {
		t.Fatalf("show after two approvals: %v\n%s", err, out)
	}
}

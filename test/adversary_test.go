package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier/slack/slacktest"
)

// The attacker's tests: a real `countersign serve` with two tenants and a
// directory of approvers, agents and an admin, attacked with every
// credential it issues — agent and approver tokens over HTTP, and the
// orchestrator's and resolver's NATS users on the bus. Each attack must be
// refused with a code and must not get a call approved that the rule's
// humans did not approve (docs/security.md lists them).

const adversaryPolicy = `version: "adv-1"
default: require_approval
rules:
  - name: config-set
    tools: ["config.set"]
    action: require_approval
    risk: high
    approvers: [alice, bob]
    quorum: 2
    timeout: 4h
    on_timeout: approve
  - name: payments
    tools: ["payments.send"]
    action: require_approval
    risk: high
    approvers: ["group:finance"]
    timeout: 1h
  - name: deploys
    tools: ["deploy"]
    action: require_approval
    approvers: [bob]
    claim_within: 1s
`

type adversary struct {
	t      *testing.T
	p      *serveProc
	dir    string // the directory file
	tokens map[string]string
	users  map[string]embedded.User // the role users serve made
}

// adversaryPeople are the directory's people: alice, bob and gina
// approve for finance (gina in tenant globex), hank approves outside
// finance, bot and bot2 are agents, root is an admin. alice's token is
// also an agent's.
var adversaryPeople = []struct{ id, tenants, groups, roles string }{
	{"alice", "[acme]", "[finance]", "[approver, agent]"},
	{"bob", "[acme]", "[finance]", "[approver]"},
	{"gina", "[globex]", "[finance]", "[approver]"},
	{"hank", "[acme]", "[]", "[approver]"},
	{"bot", "[acme, globex]", "[]", "[agent]"},
	{"bot2", "[acme]", "[]", "[agent]"},
	{"root", "[]", "[]", "[admin]"},
}

func (a *adversary) writeDirectory(without string) {
	var b strings.Builder
	b.WriteString("users:\n")
	for _, u := range adversaryPeople {
		if u.id == without {
			continue
		}
		sum := sha256.Sum256([]byte(a.tokens[u.id]))
		fmt.Fprintf(&b, "  - id: %s\n    email: %s@example.com\n    tenants: %s\n    groups: %s\n    tokens: [{sha256: %s, roles: %s}]\n",
			u.id, u.id, u.tenants, u.groups, hex.EncodeToString(sum[:]), u.roles)
	}
	tmp := a.dir + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Rename(tmp, a.dir); err != nil {
		a.t.Fatal(err)
	}
}

func startAdversary(t *testing.T) *adversary {
	dir := t.TempDir()
	a := &adversary{t: t, dir: filepath.Join(dir, "directory.yaml"), tokens: map[string]string{}}
	for _, u := range adversaryPeople {
		a.tokens[u.id] = newPerson(u.id, "").token
	}
	a.writeDirectory("")
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(adversaryPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	a.p = startServe(t, data, "--policy", pol, "--directory", a.dir)
	a.users = roleUsers(t, data)
	return a
}

// js connects as a role's NATS user, with exactly the grants serve gives it.
func (a *adversary) js(role embedded.Role) jetstream.JetStream {
	a.t.Helper()
	var info struct {
		NATSURL string `json:"nats_url"`
	}
	raw, err := os.ReadFile(filepath.Join(a.p.data, "resolver.json"))
	if err != nil {
		a.t.Fatal(err)
	}
	var res struct {
		URL string `json:"url"`
	}
	_ = json.Unmarshal(raw, &res)
	info.NATSURL = res.URL
	u := a.users[string(role)]
	nc, err := nats.Connect(info.NATSURL, nats.UserInfo(u.Name, u.Password), embedded.InboxOptionFor(u.Name))
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		a.t.Fatal(err)
	}
	return js
}

// review submits one call as who and returns its result.
func (a *adversary) review(who string, run map[string]any, tool string, args map[string]any) (verdict, eventID string) {
	a.t.Helper()
	var ans reviewAnswer
	body := map[string]any{"run": run, "tool_calls": []map[string]any{{"id": uuid.NewString(), "name": tool, "arguments": args}}}
	if code := a.p.callAs(a.tokens[who], "POST", "/v1/reviews", body, &ans); code != 200 || len(ans.Results) != 1 {
		a.t.Fatalf("review as %s: %d %+v", who, code, ans)
	}
	return ans.Results[0].Verdict, ans.Results[0].EventID
}

// record reads a record as root (a zero record while it does not exist).
func (a *adversary) record(id string) contracts.Record {
	a.t.Helper()
	var got struct {
		Record contracts.Record `json:"record"`
	}
	if code := a.p.callAs(a.tokens["root"], "GET", "/v1/approvals/"+id, nil, &got); code != 200 && code != 404 {
		a.t.Fatalf("read %s: %d", id, code)
	}
	return got.Record
}

// waitRecord polls the record (long-polling its changes) until ok holds.
func (a *adversary) waitRecord(id string, ok func(*contracts.Record) bool) contracts.Record {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := a.record(id)
		if ok(&rec) {
			return rec
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("record %s never reached the state; last: status %s refused %+v", id, rec.Status, rec.RefusedVotes)
		}
		var got json.RawMessage
		a.p.callAs(a.tokens["root"], "GET", fmt.Sprintf("/v1/approvals/%s/events", id), nil, &got)
	}
}

// wantCode sends an HTTP request as who and wants the error code.
func (a *adversary) wantCode(who, method, path string, body any, status int, code string) {
	a.t.Helper()
	var got struct {
		Error struct {
			Code, Message string
		} `json:"error"`
	}
	if s := a.p.callAs(a.tokens[who], method, path, body, &got); s != status || got.Error.Code != code {
		a.t.Fatalf("%s %s as %s: %d %s (%s), want %d %s", method, path, who, s, got.Error.Code, got.Error.Message, status, code)
	}
}

// busVote publishes a vote with the resolver's NATS user, naming approver.
func (a *adversary) busVote(js jetstream.JetStream, id, approver string) string {
	a.t.Helper()
	v := contracts.Vote{Spec: contracts.SpecVote, VoteID: uuid.NewString(), EventID: id, Decision: contracts.DecisionApprove,
		Approver: contracts.Approver{ID: approver, Via: contracts.ViaNATS}, DecidedAt: time.Now().UTC()}
	data, _ := json.Marshal(v)
	if _, err := js.Publish(context.Background(), contracts.SubjectResolvedPrefix+id, data, jetstream.WithMsgID(v.VoteID)); err != nil {
		a.t.Fatal(err)
	}
	return v.VoteID
}

// refusedWith waits until the record refused vote voteID and returns why.
func (a *adversary) refusedWith(id, voteID string) string {
	a.t.Helper()
	rec := a.waitRecord(id, func(r *contracts.Record) bool {
		for _, rv := range r.RefusedVotes {
			if rv.VoteID == voteID {
				return true
			}
		}
		return r.Terminal()
	})
	for _, rv := range rec.RefusedVotes {
		if rv.VoteID == voteID {
			return rv.Reason
		}
	}
	return "counted: " + rec.Status
}

// on is a with the subtest t failing instead of the parent.
func (a *adversary) on(t *testing.T) *adversary {
	b, p := *a, *a.p
	p.t, b.t, b.p = t, t, &p
	return &b
}

func TestAdversaryEveryCredential(t *testing.T) {
	parent := startAdversary(t)
	acme := map[string]any{"id": "run-" + uuid.NewString(), "agent": "ops-bot", "tenant": "acme"}
	globex := map[string]any{"id": "run-" + uuid.NewString(), "agent": "pay-bot", "tenant": "globex"}
	pay := map[string]any{"amount": 250000, "currency": "EUR", "iban": "DE00123"}

	t.Run("extend never shortens a deadline, and only approvers or admins extend", func(t *testing.T) {
		a := parent.on(t)
		_, id := a.review("bot", acme, "config.set", map[string]any{"key": "k", "value": "v"})
		before := a.record(id).ExpiresAt
		soon := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)
		a.wantCode("alice", "POST", "/v1/approvals/"+id+"/extend", map[string]string{"until": soon}, 422, contracts.ReasonDeadlineNotLater)
		// hank may not even know it exists.
		a.wantCode("hank", "POST", "/v1/approvals/"+id+"/extend", map[string]string{"by": "1h"}, 404, contracts.ReasonUnknownEvent)
		// The orchestrator's credential publishes extends naming nobody
		// and naming alice, both bringing the deadline forward.
		js := a.js(embedded.RoleOrchestrator)
		for _, by := range []string{"nobody", "alice"} {
			c := contracts.Command{Spec: contracts.SpecCommand, CommandID: uuid.NewString(), EventID: id, Command: contracts.CommandExtend,
				By: by, Until: time.Now().Add(5 * time.Second).UTC()}
			data, _ := json.Marshal(c)
			if _, err := js.Publish(context.Background(), contracts.CommandSubject(id), data, jetstream.WithMsgID(c.CommandID)); err != nil {
				t.Fatal(err)
			}
		}
		// A later extend by an approver: once it shows, the attacks before
		// it on the same stream were applied (and refused).
		a.p.callAs(a.tokens["bob"], "POST", "/v1/approvals/"+id+"/extend", map[string]string{"by": "1h"}, nil)
		rec := a.waitRecord(id, func(r *contracts.Record) bool { return r.ExpiresAt.After(before) })
		if rec.Status != contracts.StatusPending || !rec.ExpiresAt.Equal(before.Add(time.Hour)) {
			t.Fatalf("status %s expires %s, want pending and one hour later than %s", rec.Status, rec.ExpiresAt, before)
		}
	})

	t.Run("a forged request naming the built-in policy is refused", func(t *testing.T) {
		a := parent.on(t)
		js := a.js(embedded.RoleOrchestrator)
		for _, forged := range []struct {
			name      string
			version   string
			approvers []string
			quorum    int
		}{
			{"builtin, anyone, one approval", "builtin", []string{}, 1},
			{"the live version, hank (not in finance) as approver", "adv-1", []string{"hank"}, 1},
		} {
			id := a.forgeRequest(js, forged.version, forged.approvers, forged.quorum)
			rec := a.waitRecord(id, func(r *contracts.Record) bool { return r.Status != "" })
			if rec.Status != contracts.StatusRejected || !strings.HasPrefix(rec.Outcome.Reason, contracts.ReasonRequestRefused) {
				t.Fatalf("%s: status %s outcome %+v, want rejected request_refused", forged.name, rec.Status, rec.Outcome)
			}
		}
	})

	t.Run("a bus vote cannot cross tenants, and a removed person's votes stop counting", func(t *testing.T) {
		a := parent.on(t)
		_, id := a.review("bot", globex, "payments.send", pay)
		js := a.js(embedded.RoleResolver)
		if why := a.refusedWith(id, a.busVote(js, id, "alice")); why != contracts.ReasonWrongTenant {
			t.Fatalf("alice (acme) voting on a globex request over the bus: %s, want wrong_tenant", why)
		}
		session := a.p.signIn(t, a.tokens["gina"])
		if !a.p.signedIn(t, session) {
			t.Fatal("gina's inbox session does not work before her removal")
		}
		// gina is removed from the directory.
		a.writeDirectory("gina")
		if err := a.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		a.waitPublished(func(d contracts.Directory) bool {
			for _, p := range d.People {
				if p.ID == "gina" {
					return false
				}
			}
			return true
		})
		if why := a.refusedWith(id, a.busVote(js, id, "gina")); why != contracts.ReasonUnknownApprover {
			t.Fatalf("gina, removed, voting over the bus: %s, want unknown_approver", why)
		}
		a.wantCode("gina", "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, 401, "unauthenticated")
		if a.p.signedIn(t, session) {
			t.Fatal("gina's inbox session still works after her removal")
		}
	})

	t.Run("self-approval is judged on the person, in any spelling", func(t *testing.T) {
		a := parent.on(t)
		_, own := a.review("alice", acme, "payments.send", pay)
		a.wantCode("alice", "POST", "/v1/approvals/"+own+"/votes", map[string]any{"decision": "approve"}, 403, contracts.ReasonSelfApproval)
		for _, name := range []string{"Alice", "alice ", "ａｌｉｃｅ", "alice@example.com"} {
			run := map[string]any{"id": "run-" + uuid.NewString(), "agent": "ops-bot", "tenant": "acme", "requested_by": name}
			_, id := a.review("bot", run, "payments.send", pay)
			a.wantCode("alice", "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, 403, contracts.ReasonSelfApproval)
			if js := a.js(embedded.RoleResolver); a.refusedWith(id, a.busVote(js, id, "ALICE")) != contracts.ReasonSelfApproval {
				t.Fatalf("requested_by %q: alice over the bus as ALICE was not refused self_approval", name)
			}
		}
	})

	t.Run("an approval not claimed within claim_within lapses", func(t *testing.T) {
		a := parent.on(t)
		args := map[string]any{"service": "billing", "version": "1.2.3"}
		run := map[string]any{"id": "run-" + uuid.NewString(), "agent": "ops-bot", "tenant": "acme"}
		var ans reviewAnswer
		call := map[string]any{"id": "deploy-1", "name": "deploy", "arguments": args}
		if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/reviews", map[string]any{"run": run, "tool_calls": []any{call}}, &ans); code != 200 {
			t.Fatalf("review: %d", code)
		}
		id := ans.Results[0].EventID
		if code := a.p.callAs(a.tokens["bob"], "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, nil); code != 200 {
			t.Fatalf("bob's approval: %d", code)
		}
		rec := a.waitRecord(id, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })
		// The rule's claim_within is one second: the real clock has to pass
		// it (an injected clock cannot reach into the binary).
		time.Sleep(time.Until(rec.Outcome.DecidedAt.Add(1100 * time.Millisecond)))
		a.wantCode("bot", "POST", "/v1/approvals/"+id+"/claim", map[string]any{}, 409, contracts.ReasonApprovalLapsed)
		if rec := a.record(id); rec.LapsedAt == nil || rec.Claim != nil || rec.Status != contracts.StatusApproved {
			t.Fatalf("record after the lapsed claim: status %s lapsed_at %v claim %+v", rec.Status, rec.LapsedAt, rec.Claim)
		}
		// The same call reviewed again is not allowed: it needs a new decision.
		var again reviewAnswer
		if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/reviews", map[string]any{"run": run, "tool_calls": []any{call}}, &again); code != 200 || again.Results[0].Verdict != "expired" {
			t.Fatalf("the lapsed call reviewed again: %d %+v, want expired", code, again)
		}
	})

	t.Run("only the submitting agent claims", func(t *testing.T) {
		a := parent.on(t)
		// bot2 is named the requester, so it may read the request.
		run := map[string]any{"id": "run-" + uuid.NewString(), "agent": "ops-bot", "tenant": "acme", "requested_by": "bot2"}
		_, id := a.review("bot", run, "payments.send", pay)
		if code := a.p.callAs(a.tokens["bob"], "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, nil); code != 200 {
			t.Fatalf("bob's approval: %d", code)
		}
		a.waitRecord(id, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })
		a.wantCode("bot2", "POST", "/v1/approvals/"+id+"/claim", map[string]any{}, 403, contracts.ReasonNotPermitted)
		if code := a.p.callAs(a.tokens["bot"], "POST", "/v1/approvals/"+id+"/claim", map[string]any{}, nil); code != 200 {
			t.Fatalf("the submitting agent's claim: %d", code)
		}
	})

	t.Run("no NATS credential has the server or the arbiter write for it", func(t *testing.T) {
		a := parent.on(t)
		// An approved payment, and a config change waiting for two people.
		_, approved := a.review("bot", acme, "payments.send", pay)
		if code := a.p.callAs(a.tokens["bob"], "POST", "/v1/approvals/"+approved+"/votes", map[string]any{"decision": "approve"}, nil); code != 200 {
			t.Fatalf("bob's approval: %d", code)
		}
		a.waitRecord(approved, func(r *contracts.Record) bool { return r.Status == contracts.StatusApproved })
		_, pending := a.review("bot", acme, "config.set", map[string]any{"key": "k", "value": "v"})
		key := "$KV." + contracts.BucketApprovals + "." + pending
		// The live policy's and the directory's keys, watched by the admin
		// for the answers published there.
		policyKeys := []string{"$KV." + contracts.BucketPolicy + "." + contracts.PolicyKey, "$KV." + contracts.BucketPolicy + "." + contracts.DirectoryKey}
		admin := a.js(embedded.RoleAdmin)
		published := make(chan *nats.Msg, 16)
		for _, subject := range policyKeys {
			if _, err := admin.Conn().ChanSubscribe(subject, published); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		for _, role := range []embedded.Role{embedded.RoleResolver, embedded.RoleOrchestrator} {
			nc := a.js(role).Conn()
			send := func(subject, reply string, data []byte) {
				t.Helper()
				if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: data}); err != nil {
					t.Fatal(err)
				}
			}
			// The arbiter's answer, named to be a purge of the records or
			// the deletion of the requests' stream.
			send(contracts.VoteSubject(pending), "$JS.API.STREAM.PURGE.KV_"+contracts.BucketApprovals, []byte(`{}`))
			send(contracts.ClaimSubject(pending), "$JS.API.STREAM.DELETE."+contracts.StreamRequests, []byte(`{}`))
			// The server's answer to a read of the approved record, named
			// to land on the pending one's key.
			send("$JS.API.DIRECT.GET.KV_"+contracts.BucketApprovals+".$KV."+contracts.BucketApprovals+"."+approved, key, nil)
			send("$JS.API.STREAM.MSG.GET.KV_"+contracts.BucketApprovals, key, []byte(`{"last_by_subj":"$KV.`+contracts.BucketApprovals+`.`+approved+`"}`))
			// The server's answers, named to replace the live policy and
			// the directory every role judges by.
			for _, subject := range policyKeys {
				send("$JS.API.STREAM.MSG.GET.KV_"+contracts.BucketApprovals, subject, []byte(`{"last_by_subj":"$KV.`+contracts.BucketApprovals+`.`+approved+`"}`))
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 * len(policyKeys) {
			select {
			case <-published:
			case <-time.After(30 * time.Second):
				t.Fatal("the server's answers on the policy's keys were not published")
			}
		}
		// The pending record is the arbiter's: alice's vote counts on it,
		// and it still waits for a second person.
		if code := a.p.callAs(a.tokens["alice"], "POST", "/v1/approvals/"+pending+"/votes", map[string]any{"decision": "approve"}, nil); code != 200 {
			t.Fatalf("alice's vote on the pending record: %d", code)
		}
		rec := a.waitRecord(pending, func(r *contracts.Record) bool { return len(r.Votes) == 1 })
		if rec.Status != contracts.StatusPending || rec.Request.EventID != pending || rec.Request.ToolCall == nil || rec.Request.ToolCall.Name != "config.set" {
			t.Fatalf("the pending record after the attacks: %s, %+v", rec.Status, rec.Request.ToolCall)
		}
		// The approved record is there, and requests are still taken.
		if got := a.record(approved); got.Status != contracts.StatusApproved {
			t.Fatalf("the approved record after the attacks: %q", got.Status)
		}
		if verdict, _ := a.review("bot", acme, "config.set", map[string]any{"key": "k2", "value": "v"}); verdict != "pending" {
			t.Fatalf("a review after the attacks: %s", verdict)
		}
		// The live policy and the directory are each the one value the API
		// wrote: no answer was stored on their keys.
		st, err := admin.Stream(context.Background(), "KV_"+contracts.BucketPolicy)
		if err != nil {
			t.Fatal(err)
		}
		for _, subject := range policyKeys {
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
			if err != nil {
				t.Fatal(err)
			}
			m, err := st.GetLastMsgForSubject(context.Background(), subject)
			if err != nil {
				t.Fatal(err)
			}
			if n := info.State.Subjects[subject]; n != 1 || !bytes.Contains(m.Data, []byte(`"spec":"countersign.`)) {
				t.Fatalf("%s holds %d messages, the last %.80s", subject, n, m.Data)
			}
		}
	})
}

// forgeRequest publishes, with js (the orchestrator's user), a request for
// a 250,000 EUR payment in tenant acme naming the policy version,
// approvers and quorum it likes, and returns its event id.
func (a *adversary) forgeRequest(js jetstream.JetStream, version string, approvers []string, quorum int) string {
	a.t.Helper()
	args := json.RawMessage(`{"amount":250000,"currency":"EUR","iban":"DE00123"}`)
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		a.t.Fatal(err)
	}
	now := time.Now().UTC()
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: uuid.NewString(), Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: "forged-" + uuid.NewString(), Agent: "pay-bot", Tenant: "acme"},
		ToolCall: &contracts.ToolCall{ID: "c1", Name: "payments.send", Arguments: args, ArgumentsSHA256: sha},
		Risk:     contracts.RiskLow, Summary: "forged",
		Policy:     contracts.PolicyRef{Rule: "default", Version: version},
		Quorum:     contracts.Quorum{Required: quorum, Approvers: approvers, Veto: true, Order: contracts.OrderAny},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{}, AllowedDecisions: []string{},
		Channels: []string{}, ExpiresAt: now.Add(time.Hour), OnTimeout: contracts.OnTimeoutReject, CreatedAt: now,
	}
	if version == "adv-1" {
		req.Policy.Rule = "payments"
		req.Risk = contracts.RiskHigh
	}
	data, _ := json.Marshal(req)
	if _, err := js.Publish(context.Background(), contracts.SubjectToolRequestedPrefix+"pay-bot", data, jetstream.WithMsgID(req.EventID)); err != nil {
		a.t.Fatal(err)
	}
	return req.EventID
}

// waitPublished waits until the directory every role judges by (in
// hitl_policy, read with the orchestrator's user) satisfies ok.
func (a *adversary) waitPublished(ok func(contracts.Directory) bool) {
	a.t.Helper()
	js := a.js(embedded.RoleOrchestrator)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		a.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, contracts.DirectoryKey)
	if err != nil {
		a.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var d contracts.Directory
			if json.Unmarshal(e.Value(), &d) == nil && ok(d) {
				a.p.waitArbiterDirectory(e.Revision())
				return
			}
		case <-ctx.Done():
			a.t.Fatal("the directory was not published")
		}
	}
}

// waitDirectory waits until the directory every role judges by (in
// hitl_policy, read with the orchestrator's NATS user of p) satisfies ok.
func waitDirectory(t *testing.T, p *serveProc, ok func(contracts.Directory) bool) {
	t.Helper()
	a := &adversary{t: t, p: p, users: map[string]embedded.User{}}
	raw, err := os.ReadFile(filepath.Join(p.data, "nats-users.json"))
	if err != nil {
		t.Fatal(err)
	}
	var users []embedded.User
	if err := json.Unmarshal(raw, &users); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		a.users[string(u.Role)] = u
	}
	a.waitPublished(ok)
}

// A removed approver's email link and Slack button stop counting: the link
// is signed and the click verified, but the directory no longer lists her.
func TestRemovedApproversLinkAndSlackButtonStopCounting(t *testing.T) {
	r := newNotifyRig(t, 0)
	done := r.waitingPayment("run-removed")
	mail := r.mailTo("alice@example.com", "Approval needed")
	link := regexp.MustCompile(`https?://[^\s"<>]+/e/[A-Za-z0-9._-]+`).FindString(mail.Text)
	id := mail.Header.Get("X-Countersign-Event-Id")
	if link == "" || id == "" {
		t.Fatalf("no link or event id in the email:\n%s", mail.Text)
	}
	// alice leaves: her entry goes from the directory file, and serve
	// reloads it on SIGHUP.
	dirFile := ""
	for i, a := range r.p.cmd.Args {
		if a == "--directory" {
			dirFile = r.p.cmd.Args[i+1]
		}
	}
	raw, err := os.ReadFile(dirFile)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	skip := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "  - id: ") {
			skip = line == "  - id: alice"
		}
		if !skip {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(dirFile, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitDirectory(t, r.p, func(d contracts.Directory) bool {
		return !slices.ContainsFunc(d.People, func(p contracts.DirectoryPerson) bool { return p.ID == "alice" })
	})
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h := regexp.MustCompile(`name="h" value="([0-9a-f]{64})"`).FindStringSubmatch(string(page))
	if h != nil {
		resp, err := http.PostForm(link, url.Values{"decision": {"approve"}, "h": {h[1]}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rec quorumRecord
		if code := r.must(r.tokens["bob"], "GET", "/v1/approvals/"+id+"?wait=1s", nil, &rec); code != 200 {
			t.Fatalf("GET %s: %d", id, code)
		}
		if rec.Record.Status != contracts.StatusPending || len(rec.Record.Votes) > 0 {
			t.Fatalf("alice's link, after she was removed, changed the record: %s, votes %+v", rec.Record.Status, rec.Record.Votes)
		}
		if h == nil || slices.ContainsFunc(rec.Record.RefusedVotes, func(v contracts.RefusedVote) bool {
			return v.Approver.ID == "alice" && v.Reason == contracts.ReasonUnknownApprover
		}) {
			break // the page itself refused, or the arbiter did
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's vote was neither refused unknown_approver nor counted: %+v", rec.Record.RefusedVotes)
		}
	}
	// Her Slack button: the signature is good, but she is nobody now.
	msg := r.slackMessage(id, func(m slacktest.Message) bool { return m.HasActions() })
	click := r.slack.Click(slackSigning, msg, "countersign_approve", aliceSlack, time.Now())
	target, _ := url.Parse(r.p.url + "/slack/interactions")
	click.URL, click.Host, click.RequestURI = target, target.Host, ""
	resp, err = http.DefaultClient.Do(click)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The click is answered in Slack: she is not in the directory.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := r.slack.WaitFor(sctx, func(s *slacktest.Server) bool {
		return slices.ContainsFunc(s.ResponsePosts(), func(p slacktest.ResponsePost) bool {
			return strings.Contains(p.Text, "not in the Countersign directory")
		})
	}); err != nil {
		t.Fatalf("no answer in Slack to the removed approver's click: %v (posts %+v)", err, r.slack.ResponsePosts())
	}
	var after quorumRecord
	if code := r.must(r.tokens["bob"], "GET", "/v1/approvals/"+id, nil, &after); code != 200 ||
		after.Record.Status != contracts.StatusPending || len(after.Record.Votes) != 0 {
		t.Fatalf("alice's Slack click, after she was removed: %d %s votes %+v", code, after.Record.Status, after.Record.Votes)
	}
	// bob, still an approver, rejects: the waiting run is told.
	r.must(r.tokens["bob"], "POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "reject", "comment": "no"}, nil)
	if v, reason := r.verdict(done); v != "denied" {
		t.Fatalf("verdict %s (%s), want denied", v, reason)
	}
}

// waitArbiterDirectory waits until the arbiter judges by the directory at
// revision rev or later (its countersign_arbiter_directory_revision gauge).
func (p *serveProc) waitArbiterDirectory(rev uint64) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/metrics")
		if err != nil {
			p.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			var got float64
			if _, err := fmt.Sscanf(line, "countersign_arbiter_directory_revision %g", &got); err == nil && uint64(got) >= rev {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the arbiter did not take directory revision %d", rev)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// roleUsers are the NATS users serve made for its roles, read from
// <data>/nats-users.json, by role.
func roleUsers(t *testing.T, data string) map[string]embedded.User {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(data, "nats-users.json"))
	if err != nil {
		t.Fatal(err)
	}
	var users []embedded.User
	if err := json.Unmarshal(raw, &users); err != nil {
		t.Fatal(err)
	}
	byRole := map[string]embedded.User{}
	for _, u := range users {
		byRole[string(u.Role)] = u
	}
	return byRole
}

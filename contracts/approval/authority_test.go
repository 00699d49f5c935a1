package approval_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

func TestCanonicalIdentities(t *testing.T) {
	for _, s := range []string{"alice", "Alice", "alice ", " ALICE", "ａｌｉｃｅ", "ali\u200dce", "\ufeffalice"} {
		if got := approval.Canonical(s); got != "alice" {
			t.Errorf("Canonical(%q) = %q, want alice", s, got)
		}
	}
	if approval.Canonical("alice2") == "alice" || approval.Canonical("alíce") == "alice" {
		t.Error("different names must stay different")
	}
}

var authRoster = approval.NewRoster(contracts.Directory{Spec: contracts.SpecDirectory, Version: "t", People: []contracts.DirectoryPerson{
	{ID: "alice", Email: "alice@example.com", Tenants: []string{"acme"}, Groups: []string{"finance"}, Roles: []string{"approver", "agent"}},
	{ID: "bob", Tenants: []string{"acme"}, Groups: []string{"finance"}, Roles: []string{"approver"}},
	{ID: "root", Roles: []string{"admin"}},
	{ID: "dev", Roles: []string{"agent", "approver", "admin"}, Development: true},
	// Two entries that compare equal stand for nobody.
	{ID: "mallory"}, {ID: "Mallory"},
}})

func TestRosterFindsPeopleCanonically(t *testing.T) {
	for _, name := range []string{"alice", "ALICE", "alice@example.com", "Alice@Example.com", "ａｌｉｃｅ"} {
		if p, ok := authRoster.Find(name); !ok || p.ID != "alice" {
			t.Errorf("Find(%q) = %+v %v, want alice", name, p, ok)
		}
	}
	if _, ok := authRoster.Find("mallory"); ok {
		t.Error("two directory entries that compare equal must both be left out")
	}
	if got := authRoster.Members("group:finance"); len(got) != 2 || got[0] != "alice" || got[1] != "bob" {
		t.Errorf("Members(finance) = %v", got)
	}
}

// authRecord is a pending payment of tenant acme, quorum 1 of alice and bob.
func authRecord(mod func(*contracts.ApprovalRequested)) contracts.Record {
	req := contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: "e1", Kind: contracts.KindToolApproval,
		Run:       contracts.Run{ID: "r", Agent: "billing", Tenant: "acme"},
		ToolCall:  &contracts.ToolCall{ID: "c", Name: "payments.send", Arguments: []byte(`{}`), ArgumentsSHA256: "x"},
		Quorum:    contracts.Quorum{Required: 1, Approvers: []string{"alice", "bob"}, Veto: true},
		ExpiresAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), OnTimeout: contracts.OnTimeoutReject,
	}
	if mod != nil {
		mod(&req)
	}
	return approval.NewRecord(req, time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC))
}

// A person's own agent token makes them the requester, in any spelling of
// their name; the development principal plays every part.
func TestSelfApprovalIsJudgedCanonically(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*contracts.ApprovalRequested)
		who  string
		self bool
	}{
		{"submitted with alice's own token", func(r *contracts.ApprovalRequested) { r.Submitter = "alice" }, "alice", true},
		{"requested_by Alice", func(r *contracts.ApprovalRequested) { r.Run.RequestedBy = "Alice" }, "alice", true},
		{"requested_by with a trailing space", func(r *contracts.ApprovalRequested) { r.Run.RequestedBy = "alice " }, "alice", true},
		{"requested_by full-width", func(r *contracts.ApprovalRequested) { r.Run.RequestedBy = "ａｌｉｃｅ" }, "alice", true},
		{"requested_by her email", func(r *contracts.ApprovalRequested) { r.Run.RequestedBy = "alice@example.com" }, "alice", true},
		{"owner in capitals", func(r *contracts.ApprovalRequested) { r.Run.Owner = "ALICE" }, "alice", true},
		{"bob approves alice's request", func(r *contracts.ApprovalRequested) { r.Submitter = "alice" }, "bob", false},
		{"the development principal", func(r *contracts.ApprovalRequested) { r.Submitter = "dev" }, "dev", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := authRecord(c.mod)
			if got := approval.IsRequester(authRoster, &rec, c.who); got != c.self {
				t.Errorf("IsRequester(%s) = %v, want %v", c.who, got, c.self)
			}
		})
	}
}

func TestVotesAreJudgedByTheDirectory(t *testing.T) {
	now := time.Date(2029, 1, 1, 0, 1, 0, 0, time.UTC)
	vote := func(id string) contracts.Vote {
		return contracts.Vote{Spec: contracts.SpecVote, VoteID: "v-" + id, EventID: "e1", Decision: contracts.DecisionApprove,
			Approver: contracts.Approver{ID: id, Via: contracts.ViaNATS}, DecidedAt: now}
	}
	globex := authRecord(func(r *contracts.ApprovalRequested) { r.Run.Tenant = "globex" })
	if res := approval.ApplyVoteBy(globex, vote("alice"), now, authRoster); res.Refusal != contracts.ReasonWrongTenant {
		t.Errorf("alice (acme) on a globex request over the bus: %q, want wrong_tenant", res.Refusal)
	}
	if res := approval.ApplyVoteBy(authRecord(nil), vote("gina"), now, authRoster); res.Refusal != contracts.ReasonUnknownApprover {
		t.Errorf("a vote from someone the directory does not list: %q, want unknown_approver", res.Refusal)
	}
	res := approval.ApplyVoteBy(authRecord(func(r *contracts.ApprovalRequested) { r.Quorum.Required = 2 }), vote("ALICE"), now, authRoster)
	if res.Refusal != "" || res.Record.Votes[0].Approver.ID != "alice" {
		t.Fatalf("ALICE must count as alice: %+v", res)
	}
	again := vote("alice@example.com")
	again.VoteID = "v-2"
	if res := approval.ApplyVoteBy(res.Record, again, now, authRoster); res.Refusal != contracts.ReasonDuplicateVote {
		t.Errorf("alice again under her email: %q, want duplicate_vote (one person, one vote)", res.Refusal)
	}
}

func TestCommandsAreCheckedAgainstTheirIssuer(t *testing.T) {
	rec := authRecord(func(r *contracts.ApprovalRequested) { r.Submitter = "agent-7"; r.Run.RequestedBy = "carol" })
	for _, c := range []struct {
		command, by, want string
	}{
		{contracts.CommandExtend, "alice", ""},
		{contracts.CommandExtend, "root", ""},
		{contracts.CommandExtend, "carol", contracts.ReasonUnknownApprover},
		{contracts.CommandExtend, "nobody", contracts.ReasonUnknownApprover},
		{contracts.CommandCancel, "carol", ""},
		{contracts.CommandCancel, "agent-7", ""},
		{contracts.CommandCancel, "bob", ""},
		{contracts.CommandCancel, "nobody", contracts.ReasonUnknownApprover},
		{contracts.CommandClaim, "agent-7", ""},
		{contracts.CommandClaim, "root", ""},
		{contracts.CommandClaim, "alice", contracts.ReasonNotPermitted},
		{contracts.CommandClaim, "billing", contracts.ReasonNotPermitted},
	} {
		if got := approval.CommandRefusal(authRoster, &rec, c.command, authRoster.Issuer(c.by)); got != c.want {
			t.Errorf("%s by %s: %q, want %q", c.command, c.by, got, c.want)
		}
	}
	// An admin of another tenant manages nothing here.
	other := approval.NewRoster(contracts.Directory{People: []contracts.DirectoryPerson{{ID: "root", Tenants: []string{"globex"}, Roles: []string{"admin"}}}})
	if got := approval.CommandRefusal(other, &rec, contracts.CommandExtend, other.Issuer("root")); got != contracts.ReasonNotPermitted {
		t.Errorf("extend by an admin of globex on an acme request: %q, want not_permitted", got)
	}
}

package approval_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/approval/approvaltest"
)

// Who reads a request of tenant acme, agent billing, requested by erin for
// frank's run, approvers alice, bob and carol, escalating to dave.
func TestCanReadAndSeesSensitive(t *testing.T) {
	req := approvaltest.Request(t, func(r *contracts.ApprovalRequested) {
		r.Submitter = "agent:billing"
		r.Escalation = []contracts.EscalationTier{{After: "1h", Approvers: []string{"dave"}}}
	})
	rec := approval.NewRecord(req, approvaltest.T0)
	escalated := approval.Escalate(rec, 1, approvaltest.At(60)).Record
	cases := []struct {
		name      string
		rec       contracts.Record
		r         approval.Reader
		read, see bool
	}{
		{"an approver of it", rec, approval.Reader{ID: "alice", Approver: true}, true, true},
		{"an approver of it, limited to its tenant", rec, approval.Reader{ID: "alice", Approver: true, Tenants: []string{"acme"}}, true, true},
		{"an approver it names, limited to another tenant", rec, approval.Reader{ID: "alice", Approver: true, Tenants: []string{"globex"}}, false, false},
		{"an approver it does not name", rec, approval.Reader{ID: "mallory", Approver: true}, false, false},
		{"a named id without the approver role", rec, approval.Reader{ID: "alice"}, false, false},
		{"an escalation approver before the tier", rec, approval.Reader{ID: "dave", Approver: true}, false, false},
		{"an escalation approver once reached", escalated, approval.Reader{ID: "dave", Approver: true}, true, true},
		{"who requested it", rec, approval.Reader{ID: "erin"}, true, false},
		{"who owns the run", rec, approval.Reader{ID: "frank"}, true, false},
		{"the agent token that submitted it", rec, approval.Reader{ID: "agent:billing", Agent: true}, true, true},
		{"another agent token", rec, approval.Reader{ID: "agent:other", Agent: true}, false, false},
		{"an auditor of its tenant", rec, approval.Reader{ID: "audit", Auditor: true, Tenants: []string{"acme"}}, true, false},
		{"an auditor of another tenant", rec, approval.Reader{ID: "audit", Auditor: true, Tenants: []string{"globex"}}, false, false},
		{"an auditor of its agents", rec, approval.Reader{ID: "audit", Auditor: true, Agents: []string{"bill*"}}, true, false},
		{"an auditor of other agents", rec, approval.Reader{ID: "audit", Auditor: true, Agents: []string{"support-*"}}, false, false},
		{"an admin", rec, approval.Reader{ID: "root", Admin: true}, true, true},
		{"an admin of another tenant", rec, approval.Reader{ID: "root", Admin: true, Tenants: []string{"globex"}}, false, false},
		{"nobody in particular", rec, approval.Reader{}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := approval.CanRead(&c.rec, c.r); got != c.read {
				t.Errorf("CanRead = %v, want %v", got, c.read)
			}
			if got := approval.SeesSensitive(&c.rec, c.r); got != c.see {
				t.Errorf("SeesSensitive = %v, want %v", got, c.see)
			}
		})
	}
}

// A request without a tenant is outside every tenant-limited reader's scope.
func TestTenantLimitedReadersDoNotReadUntenantedRequests(t *testing.T) {
	rec := approval.NewRecord(approvaltest.Request(t, func(r *contracts.ApprovalRequested) { r.Run.Tenant = "" }), approvaltest.T0)
	if approval.CanRead(&rec, approval.Reader{ID: "alice", Approver: true, Tenants: []string{"acme"}}) {
		t.Fatal("a reader limited to acme reads a request without a tenant")
	}
	if !approval.CanRead(&rec, approval.Reader{ID: "alice", Approver: true}) {
		t.Fatal("an unlimited approver cannot read a request without a tenant")
	}
}

// The arbiter refuses a vote from an approver limited to other tenants,
// even when the policy names them; a vote within the tenant counts.
func TestVoteFromAnotherTenantIsRefused(t *testing.T) {
	rec := approval.NewRecord(approvaltest.Request(t), approvaltest.T0)
	out := approval.ApplyVote(rec, approvaltest.Vote("v1", "alice", contracts.DecisionApprove, func(v *contracts.Vote) {
		v.ApproverTenants = []string{"globex"}
	}), approvaltest.At(1))
	if out.Refusal != contracts.ReasonWrongTenant || out.Record.Status != contracts.StatusPending {
		t.Fatalf("refused %q, status %s; want wrong_tenant and pending", out.Refusal, out.Record.Status)
	}
	out = approval.ApplyVote(rec, approvaltest.Vote("v2", "alice", contracts.DecisionApprove, func(v *contracts.Vote) {
		v.ApproverTenants = []string{"globex", "acme"}
	}), approvaltest.At(1))
	if out.Refusal != "" || out.Record.Status != contracts.StatusApproved {
		t.Fatalf("refused %q, status %s; want approved", out.Refusal, out.Record.Status)
	}
}

package approval

import (
	"path"
	"slices"

	"github.com/countersign/countersign/contracts"
)

// Reader is who asks to read an approval: the identity behind a token or
// an inbox session, with what its roles and scope allow. Every read surface
// (API, inbox, live feed, CLI through the API, audit export) asks CanRead,
// and an approval a reader may not read does not exist for them.
type Reader struct {
	// ID is the reader's subject: an approver id, or an agent token's subject.
	ID string
	// Admin reads everything within Tenants.
	Admin bool
	// Approver reads the approvals it may decide.
	Approver bool
	// Agent reads the approvals it submitted through the API.
	Agent bool
	// Auditor (the viewer and auditor roles) reads every approval within
	// Tenants whose agent matches Agents, without deciding any.
	Auditor bool
	// Tenants limits every read to these tenants; empty means no limit.
	Tenants []string
	// Agents limits an Auditor to agents matching these patterns
	// (path.Match syntax: "billing-*"); empty means every agent.
	Agents []string
}

// InTenants reports whether tenant is within tenants; an empty list is no
// limit. A request without a tenant is outside every non-empty list.
func InTenants(tenant string, tenants []string) bool {
	return len(tenants) == 0 || slices.Contains(tenants, tenant)
}

// MatchAgent reports whether agent matches one of patterns (path.Match
// syntax); an empty list matches every agent.
func MatchAgent(agent string, patterns []string) bool {
	if len(patterns) == 0 {
		return true
	}
	return slices.ContainsFunc(patterns, func(p string) bool {
		ok, err := path.Match(p, agent)
		return err == nil && ok
	})
}

// CanRead reports whether r may read rec: within r's tenants, when r is an
// admin, may decide it (an approver of it, escalation tiers reached
// included), requested it or owns its run, submitted it, or holds a viewer
// or auditor scope that covers its agent. Anyone else may not know it
// exists.
func CanRead(rec *contracts.Record, r Reader) bool {
	run := &rec.Request.Run
	if !InTenants(run.Tenant, r.Tenants) {
		return false
	}
	switch {
	case r.Admin:
		return true
	case r.Approver && r.ID != "" && IsApprover(rec, r.ID):
		return true
	case r.ID != "" && (run.RequestedBy == r.ID || run.Owner == r.ID):
		return true
	case r.Agent && r.ID != "" && rec.Request.Submitter == r.ID:
		return true
	case r.Auditor && MatchAgent(run.Agent, r.Agents):
		return true
	}
	return false
}

// SeesSensitive reports whether r may see the values of rec's sensitive
// arguments (contracts.ApprovalRequested.Sensitive): an admin, someone who
// may decide it, or the agent that submitted it and will run it. Every
// other reader sees them masked.
func SeesSensitive(rec *contracts.Record, r Reader) bool {
	if !CanRead(rec, r) {
		return false
	}
	return r.Admin || r.Approver && IsApprover(rec, r.ID) || r.Agent && r.ID != "" && rec.Request.Submitter == r.ID
}

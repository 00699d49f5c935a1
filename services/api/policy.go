package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Error codes of the policy routes.
const (
	CodeInvalidPolicy  = "invalid_policy"
	CodeVersionExists  = "version_exists"
	CodePolicyConflict = "policy_conflict"
	CodeNoLivePolicy   = "no_live_policy"
)

// policyAnswer is the body of GET /v1/policy and of a successful POST.
type policyAnswer struct {
	Version   string    `json:"version"`
	SHA256    string    `json:"sha256,omitempty"`
	AppliedBy string    `json:"applied_by,omitempty"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
	Revision  uint64    `json:"revision,omitempty"`
	// Live is false while no policy was applied: the process serves the
	// policy it was started with.
	Live   bool   `json:"live"`
	Source string `json:"source,omitempty"`
	// Changed (POST only) is false when the same content was already live.
	Changed  *bool            `json:"changed,omitempty"`
	Warnings []policy.Problem `json:"warnings,omitempty"`
	// DirectoryGroups (GET only) names the groups the server's approver
	// directory gives members: a policy may name them without defining
	// them (policy lint asks for them).
	DirectoryGroups []string `json:"directory_groups,omitempty"`
	// StoppedGrants (POST only) are the active grants this version no
	// longer permits: from its application on, they allow no call.
	StoppedGrants []StoppedGrant `json:"stopped_grants,omitempty"`
}

// StoppedGrant is an active grant a policy version would no longer permit,
// and why: "rule changed" (the version decides the grant's calls by another
// rule) or "no longer permitted" (the rule no longer permits its scope,
// lifetime or argument mode).
type StoppedGrant struct {
	GrantID string `json:"grant_id"`
	Tool    string `json:"tool"`
	Agent   string `json:"agent"`
	Tenant  string `json:"tenant,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	Scope   string `json:"scope"`
	Rule    string `json:"rule"`
	// NewRule is the rule the version decides the grant's calls by.
	NewRule string `json:"new_rule"`
	Reason  string `json:"reason"`
}

// grantsStoppedBy lists the active grants p would no longer permit. Each
// grant is judged, as a gate would judge it, on the call that issued it
// (its run and approved arguments).
func (s *Server) grantsStoppedBy(ctx context.Context, p *policy.Policy) []StoppedGrant {
	if s.cfg.Gate == nil || s.cfg.Gate.Grants() == nil {
		return nil
	}
	now := s.cfg.Now()
	var out []StoppedGrant
	for _, g := range s.cfg.Gate.Grants().List() {
		if g.Status(now) != contracts.GrantActive {
			continue
		}
		in := policy.Input{Run: contracts.Run{ID: g.RunID, Agent: g.Agent, Tenant: g.Tenant}, Tool: g.Tool}
		if rec, _, aerr := s.getRecord(ctx, g.GrantID); aerr == nil {
			in.Run = rec.Request.Run
			switch {
			case rec.Outcome != nil && len(rec.Outcome.Arguments) > 0:
				in.Arguments = rec.Outcome.Arguments
			case rec.Request.ToolCall != nil:
				in.Arguments = rec.Request.ToolCall.Arguments
			}
		}
		// A grant the live policy already stops was reported when that
		// policy was applied: only what this version stops anew is named.
		if live := s.cfg.Gate.Policy(); live != nil {
			if _, _, stopped := stopsGrant(ctx, live, &g, in); stopped {
				continue
			}
		}
		if newRule, reason, stopped := stopsGrant(ctx, p, &g, in); stopped {
			out = append(out, StoppedGrant{GrantID: g.GrantID, Tool: g.Tool, Agent: g.Agent, Tenant: g.Tenant, RunID: g.RunID,
				Scope: g.Scope, Rule: g.Policy.Rule, NewRule: newRule, Reason: reason})
		}
	}
	slices.SortFunc(out, func(a, b StoppedGrant) int { return strings.Compare(a.GrantID, b.GrantID) })
	return out
}

// stopsGrant reports whether p no longer lets g cover the call in: the
// rule p decides it by, and why (approval.NotCoveredRule or
// NotCoveredPolicy).
func stopsGrant(ctx context.Context, p *policy.Policy, g *contracts.Grant, in policy.Input) (rule, reason string, stopped bool) {
	d := p.EvaluateContext(ctx, in)
	switch {
	case d.Rule != g.Policy.Rule:
		return d.Rule, approval.NotCoveredRule, true
	case !approval.GrantPermitted(d.Grants, g):
		return d.Rule, approval.NotCoveredPolicy, true
	}
	return d.Rule, "", false
}

// directoryGroups names the groups the approver directory gives members.
func (s *Server) directoryGroups() []string {
	if s.cfg.Directory == nil {
		return nil
	}
	d := s.cfg.Directory.Current()
	var out []string
	for _, g := range d.Groups() {
		if len(d.Members(g.Name)) > 0 {
			out = append(out, g.Name)
		}
	}
	return out
}

// inDirectory reports whether the approver directory gives group members.
func (s *Server) inDirectory(group string) bool {
	return s.cfg.Directory != nil && len(s.cfg.Directory.Current().Members(group)) > 0
}

// policyError is an error answer that lists every problem of a policy.
type policyError struct {
	Error
	Problems []policy.Problem `json:"problems"`
}

// getPolicy answers GET /v1/policy[?source=1].
func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	withSource, aerr := parseFlag(r, "source")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The source holds every tenant's rules, approvers and conditions: it
	// is for admins and for viewers and auditors of every tenant.
	if p := principalFrom(r.Context()); withSource && !mayReadPolicySource(p) {
		writeError(w, errorf(http.StatusForbidden, CodeForbidden,
			"the policy's source names every tenant's rules: only an admin, or a viewer or auditor of every tenant, reads it"))
		return
	}
	groups := s.directoryGroups()
	if s.cfg.Policies == nil {
		writeJSON(w, http.StatusOK, policyAnswer{Version: s.cfg.Gate.Policy().Version(), DirectoryGroups: groups})
		return
	}
	doc, rev, ok := s.cfg.Policies.Live()
	if !ok {
		writeJSON(w, http.StatusOK, policyAnswer{Version: s.cfg.Policies.Current().Version(), DirectoryGroups: groups})
		return
	}
	ans := policyAnswer{
		Version: doc.Version, SHA256: doc.SHA256, AppliedBy: doc.AppliedBy, AppliedAt: doc.AppliedAt,
		Revision: rev, Live: true, DirectoryGroups: groups,
	}
	if withSource {
		ans.Source = doc.Source
	}
	writeJSON(w, http.StatusOK, ans)
}

// postPolicy answers POST /v1/policy[?dry_run=1]: the body is the policy's
// YAML source. It is validated, then stored as the fleet's live policy.
// readPolicySource reads a policy's YAML source from the request body.
func readPolicySource(w http.ResponseWriter, r *http.Request) ([]byte, *Error) {
	source, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the policy exceeds %d bytes", MaxBodyBytes)
		}
		return nil, errorf(http.StatusBadRequest, CodeInvalidPolicy, "the request body could not be read")
	}
	if len(strings.TrimSpace(string(source))) == 0 {
		return nil, errorf(http.StatusBadRequest, CodeInvalidPolicy, "the request body is empty; send the policy's YAML source")
	}
	return source, nil
}

func (s *Server) postPolicy(w http.ResponseWriter, r *http.Request) {
	dryRun, aerr := parseFlag(r, "dry_run")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	source, aerr := readPolicySource(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var errs, warnings []policy.Problem
	// Groups the approver directory defines are not unknown: the
	// orchestrator resolves them from it.
	for _, p := range policy.WithoutGroupsOf(policy.Lint(source), s.inDirectory) {
		if p.Severity == "error" {
			errs = append(errs, p)
		} else {
			warnings = append(warnings, p)
		}
	}
	if len(errs) > 0 {
		writePolicyProblems(w, errs)
		return
	}
	if dryRun {
		p, err := policy.Parse(source)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, CodeInvalidPolicy, "%s", err.Error()))
			return
		}
		changed := false
		writeJSON(w, http.StatusOK, policyAnswer{Version: p.Version(), Changed: &changed, Warnings: warnings,
			StoppedGrants: s.grantsStoppedBy(r.Context(), p)})
		return
	}
	if s.cfg.Policies == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "this server does not store policies"))
		return
	}
	// What the version stops is judged before it applies, against the
	// grants active now.
	var stopped []StoppedGrant
	if np, err := policy.Parse(source); err == nil {
		stopped = s.grantsStoppedBy(r.Context(), np)
	}
	p := principalFrom(r.Context())
	res, err := orchestrator.ApplyPolicy(r.Context(), s.cfg.JS, source, p.Subject, s.cfg.Now())
	var perrs *policy.Errors
	switch {
	case errors.As(err, &perrs):
		writePolicyProblems(w, perrs.Problems)
		return
	case errors.Is(err, orchestrator.ErrPolicyVersionExists):
		writeError(w, errorf(http.StatusConflict, CodeVersionExists,
			"version %q is live with other content; give the changed policy a new version", res.Document.Version))
		return
	case errors.Is(err, orchestrator.ErrPolicyConflict):
		writeError(w, errorf(http.StatusConflict, CodePolicyConflict, "the live policy changed while applying; try again"))
		return
	case err != nil:
		writeError(w, s.backendError("apply policy", err))
		return
	}
	// Answer once this server decides with the new policy, so a review sent
	// after the answer is decided by it. Other processes switch within
	// moments; their requests record the version that decided them.
	wctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	if err := s.cfg.Policies.WaitRevision(wctx, res.Revision); err != nil {
		s.log.Warn("the applied policy is not in force here yet", "version", res.Document.Version, "err", err)
	}
	cancel()
	s.log.Info("policy applied", "version", res.Document.Version, "by", p.Subject, "changed", res.Changed)
	changed := res.Changed
	writeJSON(w, http.StatusOK, policyAnswer{
		Version: res.Document.Version, SHA256: res.Document.SHA256, AppliedBy: res.Document.AppliedBy,
		AppliedAt: res.Document.AppliedAt, Revision: res.Revision, Live: true, Changed: &changed, Warnings: warnings,
		StoppedGrants: stopped,
	})
}

// writePolicyProblems answers 400 invalid_policy with every problem found.
func writePolicyProblems(w http.ResponseWriter, ps []policy.Problem) {
	writeJSON(w, http.StatusBadRequest, struct {
		Error policyError `json:"error"`
	}{policyError{Error: Error{Code: CodeInvalidPolicy, Message: problemSummary(ps)}, Problems: ps}})
}

func problemSummary(ps []policy.Problem) string {
	if len(ps) == 1 {
		return "the policy has 1 problem: " + ps[0].String()
	}
	return "the policy has " + strconv.Itoa(len(ps)) + " problems; the first: " + ps[0].String()
}

// mayReadPolicySource reports whether p may read the whole policy's source.
func mayReadPolicySource(p *Principal) bool {
	if len(p.Tenants) > 0 {
		return false
	}
	return slices.Contains(p.Roles, RoleAdmin) || slices.Contains(p.Roles, RoleViewer) || slices.Contains(p.Roles, RoleAuditor)
}

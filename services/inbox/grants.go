package inbox

import (
	"net/http"
	"net/url"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/services/api"
)

// The grants page lists the standing grants the person may read (those of
// approvals they may read) and revokes them: a revocation is the API's,
// answered once the arbiter has stored it.

// grantRow is one grant on the grants page.
type grantRow struct {
	GrantID   string
	Tool      string
	Scope     string
	Where     string
	Arguments string
	Status    string
	GrantedBy string
	GrantedAt moment
	Expires   moment
	// RevokedBy and RevokedAt say who revoked it, and when.
	RevokedBy string
	RevokedAt moment
	// CanRevoke: the person may revoke it (an admin, or an approver of the
	// approval that issued it); the API checks again.
	CanRevoke bool
}

type grantsPage struct {
	Page
	Status   string
	Statuses []string
	Rows     []grantRow
	Result   string
	Error    string
}

// getGrants serves GET /grants[?status=active|expired|revoked|all].
func (in *Inbox) getGrants(w http.ResponseWriter, r *http.Request, sess *session) {
	status := r.URL.Query().Get("status")
	switch status {
	case "":
		status = contracts.GrantActive
	case contracts.GrantActive, contracts.GrantExpired, contracts.GrantRevoked, "all":
	default:
		in.message(w, http.StatusBadRequest, sess, "Unknown status: active, expired, revoked or all.")
		return
	}
	pg := in.grantsPage(r, sess, status)
	if id := r.URL.Query().Get("revoked"); id != "" {
		for _, g := range in.api.Grants(r.Context(), &sess.p, "all", "", "") {
			if g.GrantID == id && g.Revoked != nil {
				pg.Result = "Grant " + id + " is revoked: no gate lets it allow a call any more."
			}
		}
	}
	in.render(w, http.StatusOK, "grants", pg)
}

func (in *Inbox) grantsPage(r *http.Request, sess *session, status string) grantsPage {
	pg := grantsPage{Page: in.pageFor(sess, "Grants", "grants"), Status: status,
		Statuses: []string{contracts.GrantActive, contracts.GrantExpired, contracts.GrantRevoked, "all"}}
	now := in.now()
	for _, g := range in.api.Grants(r.Context(), &sess.p, status, "", "") {
		gr := grantRow{
			GrantID: g.GrantID, Tool: g.Tool, Scope: g.Scope, Status: g.Status, GrantedAt: momentAgo(now, g.GrantedAt),
			Expires: momentUntil(now, g.ExpiresAt), Arguments: "the same arguments",
		}
		for i, by := range g.GrantedBy {
			if i > 0 {
				gr.GrantedBy += ", "
			}
			gr.GrantedBy += by
		}
		gr.Where = "agent " + g.Agent
		if g.Tenant != "" {
			gr.Where += ", tenant " + g.Tenant
		}
		if g.Scope == contracts.GrantScopeRun {
			gr.Where += ", run " + g.RunID
		}
		if g.Arguments == contracts.GrantArgumentsCondition {
			gr.Arguments = "arguments where " + g.Condition
		}
		if g.Revoked != nil {
			gr.RevokedBy, gr.RevokedAt = g.Revoked.By, momentAgo(now, g.Revoked.At)
		}
		if g.Status == contracts.GrantActive && sess.p.Has(api.RoleApprover, api.RoleAdmin) {
			if rec, aerr := in.api.Record(r.Context(), sess.p, g.GrantID, 0); aerr == nil {
				gr.CanRevoke = sess.p.Has(api.RoleAdmin) || approval.IsApprover(rec, sess.p.Subject)
			}
		}
		pg.Rows = append(pg.Rows, gr)
	}
	return pg
}

// postRevokeGrant serves POST /grants/{grant_id}/revoke (form: csrf).
func (in *Inbox) postRevokeGrant(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("grant_id")
	_, aerr := in.api.RevokeGrant(r.Context(), &sess.p, id)
	if aerr != nil && aerr.Status != http.StatusAccepted {
		in.log.Info("inbox grant revocation refused", "grant_id", id, "subject", sess.p.Subject, "code", aerr.Code)
		pg := in.grantsPage(r, sess, contracts.GrantActive)
		pg.Error = "The grant was not revoked: " + aerr.Message
		in.render(w, aerr.Status, "grants", pg)
		return
	}
	in.log.Info("inbox grant revocation", "grant_id", id, "subject", sess.p.Subject)
	http.Redirect(w, r, "/grants?status=all&revoked="+url.QueryEscape(id), http.StatusSeeOther)
}

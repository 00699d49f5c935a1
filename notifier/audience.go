package notifier

import (
	"context"
	"fmt"
	"slices"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// This file is the read rule on the notifier's side: who may be told of a
// request. A notification shows a request, so it goes only to someone who
// may read it (approval.CanRead), as the live directory describes them at
// the moment it is sent; the interactive channels (email pages, Slack
// buttons) apply the same rule to whoever a link or message reached.

// ReaderOf is the approval.Reader a person of the directory is judged as
// when a notification, an email page or a Slack message would show them a
// request: an approver (a person a policy names approves by being named),
// an admin when one of their tokens holds the admin role, within their
// tenants. Viewer and auditor roles do not count: their reach may be
// limited per token to some agents, which the directory does not carry.
func ReaderOf(p contracts.DirectoryPerson) approval.Reader {
	return approval.Reader{ID: p.ID, Approver: true, Admin: slices.Contains(p.Roles, "admin"), Tenants: p.Tenants}
}

// MayTell reports whether person p may be told of rec: approval.CanRead
// for ReaderOf(p). When not, why says so in words for the approval's
// timeline, naming p but none of p's tenants.
func MayTell(rec *contracts.Record, p contracts.DirectoryPerson) (ok bool, why string) {
	if approval.CanRead(rec, ReaderOf(p)) {
		return true, ""
	}
	switch tenant := rec.Request.Run.Tenant; {
	case !approval.InTenants(tenant, p.Tenants) && tenant == "":
		return false, fmt.Sprintf("%s is limited to tenants and this request names none", p.ID)
	case !approval.InTenants(tenant, p.Tenants):
		return false, fmt.Sprintf("%s may not read requests of this tenant", p.ID)
	default:
		return false, fmt.Sprintf("%s may not read this request (neither an approver of it nor an admin)", p.ID)
	}
}

// ReadRule reports whether the person with directory id may read rec now.
// An error means the directory could not be consulted; the caller then
// shows nothing of rec. The interactive channels take one in their
// configuration: a page or message that would show rec to someone it may
// not is answered as for an approval that does not exist.
type ReadRule func(ctx context.Context, id string, rec *contracts.Record) (bool, error)

// Scoped is implemented by a channel whose shared destinations take only
// the requests of some tenants (webhook endpoints configured with
// tenants). The notifier routes nothing to a destination that does not
// take a request's tenant, and the channel refuses it as well.
type Scoped interface {
	// Takes reports whether the destination at address takes events of
	// requests of tenant ("" for a request without a tenant).
	Takes(address, tenant string) bool
}

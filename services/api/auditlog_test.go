package api_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/services/api"
)

// TestAuditExportIsForAuditorsAndVerifies: an auditor (and an admin) gets
// the audit log's bundle, which verifies; an approver is refused, and the
// range is checked.
func TestAuditExportIsForAuditorsAndVerifies(t *testing.T) {
	o := setupOversight(t)
	sub, err := o.srv.Connect().SubscribeSync(audit.SubjectEntryPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	id := o.propose(t, "acme", "run-1", "payments.send", `{"amount":1}`)
	if m, err := sub.NextMsg(10 * time.Second); err != nil || m.Subject != audit.SubjectEntryPrefix+id {
		t.Fatalf("no audit entry for %s: %v", id, err)
	}

	o.call(t, "GET", "/v1/audit/export", "alice", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	o.call(t, "GET", "/v1/audit/export", "", nil).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")
	o.call(t, "GET", "/v1/audit/export?since=yesterday", "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, "since")
	o.call(t, "GET", "/v1/audit/export?from=2026-01-01T00:00:00Z", "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, "from")

	for _, who := range []string{"auditor-acme", "admin"} {
		r := o.call(t, "GET", "/v1/audit/export", who, nil)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("%s: %d %s", who, r.status, r.body)
		}
		_, rep, err := audit.Verify(context.Background(), bytes.NewReader(r.body), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || rep.Entries != 1 || rep.Unsigned != 1 {
			t.Fatalf("%s: report %+v; want one entry, not signed (this arbiter holds no key)", who, rep)
		}
	}
}

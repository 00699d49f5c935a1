package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/audit/ocsf"
	"github.com/countersign/countersign/services/api"
)

// TestAuditExportIsForAuditorsAndVerifies: an auditor of every tenant (and
// an admin) gets the audit log's bundle, which verifies; an approver is
// refused, and so is an auditor limited to a tenant (the bundle holds every
// tenant's entries); the range is checked.
func TestAuditExportIsForAuditorsAndVerifies(t *testing.T) {
	o := setupOversight(t)
	id := o.propose(t, "acme", "run-1", "payments.send", `{"amount":1}`)
	if got := auditIDs(t, o.srv.JetStream(), 1); got[0] != id {
		t.Fatalf("audit entry for %s, want %s", got[0], id)
	}

	o.call(t, "GET", "/v1/audit/export", "alice", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	o.call(t, "GET", "/v1/audit/export", "auditor-acme", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	o.call(t, "GET", "/v1/audit/export", "", nil).wantError(t, http.StatusUnauthorized, api.CodeUnauthenticated, "")
	o.call(t, "GET", "/v1/audit/export?since=yesterday", "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, "since")
	o.call(t, "GET", "/v1/audit/export?from=2026-01-01T00:00:00Z", "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, "from")

	for _, who := range []string{"auditor", "admin"} {
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

// TestAuditExportOCSFKeepsToTheCallersTenants: format=ocsf streams one OCSF
// event per entry, each carrying its approval's tenant; an auditor limited
// to acme gets acme's entries only, an admin every tenant's; none holds the
// call's arguments or tool; an unknown format is refused.
func TestAuditExportOCSFKeepsToTheCallersTenants(t *testing.T) {
	o := setupOversight(t)
	acme := o.propose(t, "acme", "run-1", "payments.send", `{"iban":"DE44500105175407324931"}`)
	globex := o.propose(t, "globex", "run-2", "payments.send", `{"iban":"DE44500105175407324931"}`)
	auditIDs(t, o.srv.JetStream(), 2)
	o.call(t, "GET", "/v1/audit/export?format=cef", "admin", nil).wantError(t, http.StatusBadRequest, api.CodeInvalidParameter, "format")
	// The native bundle is the whole chain: not for a token limited to
	// tenants, whatever range it asks for.
	o.call(t, "GET", "/v1/audit/export", "auditor-acme", nil).wantError(t, http.StatusForbidden, api.CodeForbidden, "")
	for who, want := range map[string][]string{"auditor-acme": {acme}, "admin": {acme, globex}} {
		r := o.call(t, "GET", "/v1/audit/export?format=ocsf", who, nil)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("%s: %d %s", who, r.status, r.body)
		}
		if bytes.Contains(r.body, []byte("DE445")) || bytes.Contains(r.body, []byte("payments.send")) {
			t.Fatalf("%s: the OCSF export holds the call's arguments or tool:\n%s", who, r.body)
		}
		var got []string
		for _, line := range bytes.Split(bytes.TrimSpace(r.body), []byte("\n")) {
			var ev ocsf.Event
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.ClassUID != ocsf.ClassAPIActivity || ev.API.Operation != audit.ChangeCreated {
				t.Fatalf("%s: %s", who, line)
			}
			got = append(got, ev.Metadata.CorrelationUID+"@"+ev.Metadata.TenantUID)
		}
		var wantIDs []string
		for _, id := range want {
			tenant := "acme"
			if id == globex {
				tenant = "globex"
			}
			wantIDs = append(wantIDs, id+"@"+tenant)
		}
		if !slices.Equal(got, wantIDs) {
			t.Fatalf("%s: events of %v, want %v", who, got, wantIDs)
		}
	}
}

// auditIDs waits until the log has stored n entries, however they were
// batched, and returns the ids they name. It reads the stream (a consumer
// hands over stored messages only), not the subject: a message is seen on
// its subject before it is stored, and an export right after would miss it.
func auditIDs(t *testing.T, js jetstream.JetStream, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, audit.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{audit.SubjectPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for len(ids) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("%d of %d audit entries: %v", len(ids), n, err)
		}
		raws, _, err := audit.Entries(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range raws {
			ids = append(ids, audit.IDOf(raw))
		}
	}
	return ids
}

package api

import (
	"net/http"
	"time"

	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events/auditlog"
)

// AuditLogRoles may export the audit log (admins may do everything). An
// entry holds no arguments, comments or answers (docs/audit.md), so the
// export is the same for every reader.
var AuditLogRoles = []string{RoleAuditor}

// getAuditExport answers GET /v1/audit/export: the audit log's bundle of
// [since, until] (RFC 3339; either end open), streamed as JSON Lines as the
// stream is read, for `countersign audit verify` or any verifier of the
// format; with format=ocsf, the entries as OCSF events instead.
func (s *Server) getAuditExport(w http.ResponseWriter, r *http.Request) {
	var since, until time.Time
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "until" && k != "format" {
			writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, k, "unknown query parameter %q", k))
			return
		}
	}
	for name, at := range map[string]*time.Time{"since": &since, "until": &until} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, name, "%s must be an RFC 3339 time", name))
				return
			}
			*at = t
		}
	}
	switch q.Get("format") {
	case "", AuditFormatNative:
	case AuditFormatOCSF:
		s.exportOCSF(w, r, since, until)
		return
	default:
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "format", "format must be %s or %s", AuditFormatNative, AuditFormatOCSF))
		return
	}
	// The native bundle is the whole chain (a chain with entries cut out
	// does not verify), so it is for those who may read every tenant's.
	if p := principalFrom(r.Context()); len(p.Tenants) > 0 || len(p.Agents) > 0 {
		writeError(w, errorf(http.StatusForbidden, CodeForbidden,
			"the native audit bundle holds every tenant's entries; a token limited to tenants or agents exports format=ocsf, which keeps to them"))
		return
	}
	keys := s.cfg.ReceiptKeys
	if keys == nil {
		keys = receipt.NewKeySet()
	}
	h := audit.Header{ExportedAt: s.cfg.Now().UTC(), Keys: keys.JWKS()}
	if !since.IsZero() {
		h.Since = &since
	}
	if !until.IsZero() {
		h.Until = &until
	}
	if _, _, err := auditlog.State(r.Context(), s.cfg.JS); err != nil {
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the audit log cannot be read now"))
		return
	}
	fw := startExport(w, "countersign-audit.jsonl")
	if err := auditlog.Export(r.Context(), s.cfg.JS, fw, h, since, until); err != nil {
		// The status is sent: the bundle ends short, and the verifier
		// reports what it lacks.
		s.cfg.Logger.Warn("audit export ended early", "err", err)
	}
}

// Formats of GET /v1/audit/export.
const (
	AuditFormatNative = "native"
	AuditFormatOCSF   = "ocsf"
)

// exportOCSF streams the entries of [since, until] as OCSF events (JSON
// Lines; docs/audit.md#ocsf). Unlike a bundle, which is the whole chain so
// that it verifies, it holds only the entries of the caller's tenants when
// the caller is limited to tenants.
func (s *Server) exportOCSF(w http.ResponseWriter, r *http.Request, since, until time.Time) {
	p := principalFrom(r.Context())
	if _, _, err := auditlog.State(r.Context(), s.cfg.JS); err != nil {
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the audit log cannot be read now"))
		return
	}
	fw := startExport(w, "countersign-audit.ocsf.jsonl")
	keep := func(e *audit.Entry) bool { return approval.InTenants(e.Tenant, p.Tenants) }
	if err := auditlog.ExportOCSF(r.Context(), s.cfg.JS, fw, since, until, keep); err != nil {
		s.cfg.Logger.Warn("audit export (ocsf) ended early", "err", err)
	}
}

// startExport sends the headers of an export named file and returns the
// writer that streams its body.
func startExport(w http.ResponseWriter, file string) flushWriter {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="`+file+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return flushWriter{w: w, rc: http.NewResponseController(w)}
}

// flushWriter sends each write on at once.
type flushWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

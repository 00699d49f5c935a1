package api

import (
	"net/http"
	"time"

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
// format.
func (s *Server) getAuditExport(w http.ResponseWriter, r *http.Request) {
	var since, until time.Time
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "until" {
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
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="countersign-audit.jsonl"`)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fw := flushWriter{w: w, rc: http.NewResponseController(w)}
	if err := auditlog.Export(r.Context(), s.cfg.JS, fw, h, since, until); err != nil {
		// The status is sent: the bundle ends short, and the verifier
		// reports what it lacks.
		s.cfg.Logger.Warn("audit export ended early", "err", err)
	}
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

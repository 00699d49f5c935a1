package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
)

// Who may read what is decided by approval.CanRead, for every read of this
// package and the inbox: a record the caller may not read is answered as a
// missing one (404 unknown_event), so that its existence does not leak.

// unreadable is the answer to a record p may not read: the same as for a
// record that does not exist.
func unreadable(id string) *Error {
	return errorf(http.StatusNotFound, CodeUnknownEvent, "no approval %s", id)
}

// readableRecord reads record id for p.
func (s *Server) readableRecord(ctx context.Context, p *Principal, id string) (*contracts.Record, uint64, *Error) {
	rec, rev, aerr := s.getRecord(ctx, id)
	if aerr == nil && !p.CanRead(rec) {
		return nil, 0, unreadable(id)
	}
	return rec, rev, aerr
}

// mayRead reports whether p may read approval id, from what the records
// index holds of it (no read of the record); a record the index does not
// know yet is read from the bucket.
func (s *Server) mayRead(ctx context.Context, p *Principal, id string) bool {
	if who := s.index.who(id); who != nil {
		return approval.CanRead(who, p.Reader())
	}
	_, _, aerr := s.readableRecord(ctx, p, id)
	return aerr == nil
}

// readableRecordSoon is getRecordSoon for p.
func (s *Server) readableRecordSoon(ctx context.Context, p *Principal, id string, d time.Duration) (*contracts.Record, uint64, *Error) {
	start := time.Now()
	rec, rev, aerr := s.getRecordSoon(ctx, id, d)
	if aerr == nil && !p.CanRead(rec) {
		holdRefusal(ctx, start.Add(d)) // as long as a missing record is waited for
		return nil, 0, unreadable(id)
	}
	return rec, rev, aerr
}

// Surfaces a read is recorded as coming from.
const (
	SurfaceAPI   = "api"
	SurfaceInbox = "inbox"
	SurfaceCLI   = "cli"
)

// surfaceOf tells the CLI (which names itself in User-Agent) from other
// API clients.
func surfaceOf(r *http.Request) string {
	if strings.HasPrefix(r.UserAgent(), "countersign-cli/") {
		return SurfaceCLI
	}
	return SurfaceAPI
}

// readAuditWindow is how often the same reader's reads of one approval, on
// one surface, are recorded: once per window (an agent polling its own
// request is recorded once, not at every poll). Exports are always recorded.
const readAuditWindow = 10 * time.Minute

// recordRead records on hitl.approval.read.<event_id> that p read rec (what
// is contracts.ReadRecord: only for requests with sensitive arguments) or
// exported its timeline (contracts.ReadExport: always). A failure to record
// is logged; the read is answered either way.
func (s *Server) recordRead(ctx context.Context, surface string, p *Principal, rec *contracts.Record, what string) {
	if what == contracts.ReadRecord && !sensitive(rec) {
		return
	}
	now := s.cfg.Now().UTC()
	read := contracts.Read{Spec: contracts.SpecRead, EventID: rec.Request.EventID, Reader: p.Subject, Surface: surface, What: what, At: now}
	msgID := ""
	if what == contracts.ReadRecord {
		msgID = "read:" + read.EventID + ":" + p.Subject + ":" + surface + ":" + strconv.FormatInt(now.Unix()/int64(readAuditWindow/time.Second), 10)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := events.Publish(ctx, s.cfg.JS, contracts.ReadSubject(read.EventID), read, msgID, nil); err != nil {
		s.log.Error("the read of an approval could not be recorded", "event_id", read.EventID, "reader", p.Subject, "what", what, "err", err)
	}
}

// auditRead records an API read of rec by the caller of r.
func (s *Server) auditRead(r *http.Request, p *Principal, rec *contracts.Record, what string) {
	s.recordRead(r.Context(), surfaceOf(r), p, rec, what)
}

// sensitive reports whether rec's arguments (the request's, its edits' or
// its outcome's) have values that are shown only to those who may decide it.
func sensitive(rec *contracts.Record) bool { return len(approval.RecordSensitive(rec)) > 0 }

// shown is rec as p may see it: its sensitive argument values masked, and
// every arguments hash left out, unless p may decide it (or submitted it,
// or is an admin); never with a receipt (see withReceipt).
func (s *Server) shown(rec *contracts.Record, p *Principal) *contracts.Record {
	if rec.Claim != nil && rec.Claim.Receipt != "" {
		// A record stored before receipts moved out of it.
		c, claim := *rec, *rec.Claim
		claim.Receipt = ""
		c.Claim = &claim
		rec = &c
	}
	if !sensitive(rec) || approval.SeesSensitive(rec, p.Reader()) {
		return rec
	}
	out := approval.RedactRecord(*rec)
	return &out
}

// receiptReadWait bounds how long a read of a record waits for the
// receipt its claim names (see orchestrator.ReadReceipt).
const receiptReadWait = time.Second

// withReceipt is rec (as shown to p) with its claim's receipt filled in
// when p is the claimant, the issuer of the accepted claim: a receipt is a
// single-use bearer token, so no other reader (a viewer, another approver,
// an admin) gets it.
func (s *Server) withReceipt(ctx context.Context, rec *contracts.Record, p *Principal, wait time.Duration) *contracts.Record {
	if rec.Claim == nil || rec.Claim.ReceiptID == "" {
		return rec
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := s.receipts.Read(ctx, rec.Request.EventID, rec.Claim)
	if err != nil {
		s.log.Warn("the receipt of a claim could not be read", "event_id", rec.Request.EventID, "err", err)
	}
	if r.Receipt == "" || r.By != p.Subject {
		return rec
	}
	c, claim := *rec, *rec.Claim
	claim.Receipt = r.Receipt
	c.Claim = &claim
	return &c
}

// feedRecordWait is how long the live feed holds a change for a record
// that is not in the bucket yet, before leaving it out.
const feedRecordWait = 2 * time.Second

// forReader is what the live feed sends p of message m: nothing (false)
// about a request p may not read, and the message with its sensitive
// argument values masked unless p may see them.
func (s *Server) forReader(ctx context.Context, p *Principal, m streamMsg) ([]byte, bool) {
	reader := p.Reader()
	if m.kind == KindRequested {
		var req contracts.ApprovalRequested
		if json.Unmarshal(m.data, &req) != nil {
			return nil, false
		}
		rec := &contracts.Record{Status: contracts.StatusPending, Request: req}
		switch {
		case !approval.CanRead(rec, reader):
			return nil, false
		case len(req.Sensitive) > 0 && !approval.SeesSensitive(rec, reader):
			data, err := json.Marshal(approval.RedactRequest(req))
			return data, err == nil
		}
		return m.data, true
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(m.data, &ev) != nil || !contracts.ValidEventID(ev.EventID) {
		return nil, false
	}
	who := s.index.who(ev.EventID)
	if who == nil {
		// Not in the index: a record older than the decided ones it keeps,
		// or one its watch of the bucket has not reached yet. The bucket
		// decides, not the index.
		who = s.awaitRecord(ctx, ev.EventID, feedRecordWait)
	}
	if who == nil || !approval.CanRead(who, reader) {
		return nil, false
	}
	if m.kind == KindDecided && sensitive(who) && !approval.SeesSensitive(who, reader) {
		return redactDecided(m.data, who)
	}
	return m.data, true
}

// redactDecided masks the sensitive values in a decided event's outcome
// and leaves out its arguments hash.
func redactDecided(data []byte, who *contracts.Record) ([]byte, bool) {
	var d contracts.Decided
	if json.Unmarshal(data, &d) != nil {
		return nil, false
	}
	d.Outcome = approval.RedactOutcome(who.Request.Kind, d.Outcome, approval.RecordSensitive(who))
	out, err := json.Marshal(d)
	return out, err == nil
}

// shownEvents are a timeline's events as p may see them (rec is the record
// they belong to): decided events with the outcome's sensitive values
// masked unless p may see them.
func (s *Server) shownEvents(rec *contracts.Record, p *Principal, evs []TimelineEvent) []TimelineEvent {
	if !sensitive(rec) || approval.SeesSensitive(rec, p.Reader()) {
		return evs
	}
	out := make([]TimelineEvent, len(evs))
	for i, ev := range evs {
		if ev.Kind == KindDecided {
			if data, ok := redactDecided(ev.Data, rec); ok {
				ev.Data = data
			} else {
				ev.Data = json.RawMessage("null")
			}
		}
		out[i] = ev
	}
	return out
}

// scopeRun checks that p may submit for run's tenant and agent. A token
// limited to one tenant submits for it when the run names none; one
// limited to several must name one of them.
func scopeRun(p *Principal, run *contracts.Run) *Error {
	if run.Tenant == "" && len(p.Tenants) == 1 {
		run.Tenant = p.Tenants[0]
	}
	if !approval.InTenants(run.Tenant, p.Tenants) {
		return fieldError(http.StatusForbidden, CodeForbidden, "run.tenant",
			"this token may submit only for the tenants %s, not for %q", strings.Join(p.Tenants, ", "), run.Tenant)
	}
	if !slices.Contains(p.Roles, RoleAdmin) && !approval.MatchAgent(run.Agent, p.Agents) {
		return fieldError(http.StatusForbidden, CodeForbidden, "run.agent",
			"this token may submit only as the agents %s, not as %q", strings.Join(p.Agents, ", "), run.Agent)
	}
	return nil
}

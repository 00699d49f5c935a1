package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
)

// maxTimelineEvents bounds one timeline answer.
const maxTimelineEvents = 10000

// Kinds of timeline entries (TimelineEvent.Kind).
const (
	KindRequested = "requested"
	KindDecided   = "decided"
	KindChanged   = "changed"
	KindNotify    = "notify"
	// KindRead is a recorded read of the approval (contracts.Read).
	KindRead = "read"
)

// TimelineEvent is one entry of GET /v1/approvals/{event_id}/events: the
// request, then every message of HITL_EVENTS about the approval, in stream
// order, with its subject and JSON as stored.
type TimelineEvent struct {
	At      time.Time       `json:"at"`
	Kind    string          `json:"kind"`
	Subject string          `json:"subject"`
	Seq     uint64          `json:"seq,omitempty"`
	Data    json.RawMessage `json:"data"`
}

// Timeline is the answer of GET /v1/approvals/{event_id}/events.
type Timeline struct {
	Events    []TimelineEvent `json:"events"`
	Truncated bool            `json:"truncated,omitempty"`
}

// eventKind names a HITL_EVENTS subject's kind.
func eventKind(subject string) string {
	switch {
	case strings.HasPrefix(subject, contracts.SubjectDecidedPrefix):
		return KindDecided
	case strings.HasPrefix(subject, contracts.SubjectChangedPrefix):
		return KindChanged
	case strings.HasPrefix(subject, contracts.SubjectNotifyPrefix):
		return KindNotify
	case strings.HasPrefix(subject, contracts.SubjectReadPrefix):
		return KindRead
	case strings.HasPrefix(subject, contracts.SubjectToolRequestedPrefix), strings.HasPrefix(subject, contracts.SubjectInputRequestedPrefix):
		return KindRequested
	}
	return "unknown"
}

// getTimeline answers GET /v1/approvals/{event_id}/events: the request, then
// every outcome, change and notification receipt of the approval, in order.
func (s *Server) getTimeline(w http.ResponseWriter, r *http.Request) {
	id, aerr := eventIDParam(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx := r.Context()
	p := principalFrom(ctx)
	rec, _, aerr := s.readableRecord(ctx, p, id)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	shown := s.shown(rec, p)
	req, err := json.Marshal(shown.Request)
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, CodeInternal, "the request could not be encoded"))
		return
	}
	subject := contracts.ToolRequestedSubject(rec.Request.Run.Agent)
	if rec.Request.Kind == contracts.KindHumanInput {
		subject = contracts.InputRequestedSubject(rec.Request.Run.Agent)
	}
	ans := Timeline{Events: []TimelineEvent{{At: rec.Request.CreatedAt, Kind: KindRequested, Subject: subject, Data: req}}}
	more, truncated, err := s.readEvents(ctx, id)
	if err != nil {
		writeError(w, s.backendError("read timeline", err))
		return
	}
	ans.Events = append(ans.Events, s.shownEvents(rec, p, more)...)
	ans.Truncated = truncated
	// The export is recorded once read: the next export shows it.
	s.auditRead(r, p, rec, contracts.ReadExport)
	writeJSON(w, http.StatusOK, ans)
}

// readEvents reads every HITL_EVENTS message about one approval (its
// outcome, its changes and the built-in channels' receipts) with message
// gets on literal subjects, so a timeline read creates no consumer and
// costs the same on a stream of any length.
func (s *Server) readEvents(ctx context.Context, id string) ([]TimelineEvent, bool, error) {
	st, err := s.events.Get(ctx)
	if err != nil {
		return nil, false, err
	}
	subjects := []string{contracts.DecidedSubject(id), contracts.ChangedSubject(id), contracts.ReadSubject(id)}
	for _, ch := range notifier.DeliveringChannels {
		subjects = append(subjects, notifier.ReceiptSubject(ch, id))
	}
	msgs, truncated, err := events.ReadSubjects(ctx, st, subjects, maxTimelineEvents)
	if err != nil {
		return nil, false, err
	}
	out := make([]TimelineEvent, 0, len(msgs))
	for _, m := range msgs {
		ev := TimelineEvent{Kind: eventKind(m.Subject), Subject: m.Subject, Data: json.RawMessage(m.Data),
			At: m.Time.UTC(), Seq: m.Sequence}
		if !json.Valid(ev.Data) {
			ev.Data = json.RawMessage("null")
		}
		out = append(out, ev)
	}
	return out, truncated, nil
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// POST /v1/policy/replay replays the recorded requests of a window against
// a candidate policy and reports, per rule of the candidate, what would
// change. It reads the approvals bucket's stream a page of record messages
// at a time (one bounded consumer a page), and keeps counts and a few
// examples, never the records: memory does not grow with the history.
// The answer is NDJSON: progress lines while it reads, then the report.

// ReplayRoles may replay a candidate: admins and auditors.
var ReplayRoles = []string{RoleAuditor}

// replayPage is how many record messages one page of a replay reads.
const replayPage = 128

// ReplaySees says what a replay can and cannot see; every report carries it.
const ReplaySees = "Replay sees the calls the policy in force gated: the approval requests in the hitl_approvals bucket " +
	"(pending and decided, within the bucket's retention). Calls the policy allowed or denied outright created no request " +
	"and are not recorded anywhere a replay can read (the shadow counters count them as they happen), so a candidate " +
	"that would gate or deny them is not seen here; questions (human_input) are counted, not replayed."

// ReplayQuery is the window of a replay: requests created in [Since, Until).
type ReplayQuery struct {
	Since, Until time.Time
}

// ReplayProgress is a progress line of a replay.
type ReplayProgress struct {
	// Scanned record messages of Total, the messages the bucket's stream
	// held when the replay began.
	Scanned uint64 `json:"scanned"`
	Total   uint64 `json:"total"`
	// Replayed requests so far.
	Replayed int `json:"replayed"`
}

// ReplayAnswer is a replay's report.
type ReplayAnswer struct {
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Scanned uint64    `json:"scanned"`
	policy.ReplayReport
	// Sees is ReplaySees.
	Sees string `json:"sees"`
}

// replayLine is one line of the answer: progress, the report, or an error
// that ended the replay.
type replayLine struct {
	Progress *ReplayProgress `json:"progress,omitempty"`
	Report   *ReplayAnswer   `json:"report,omitempty"`
	Error    *Error          `json:"error,omitempty"`
}

// postPolicyReplay serves POST /v1/policy/replay?since=30d&until=: the
// body is the candidate's YAML source.
func (s *Server) postPolicyReplay(w http.ResponseWriter, r *http.Request) {
	q, aerr := parseReplayQuery(r, s.cfg.Now())
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	source, aerr := readPolicySource(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	cand, err := policy.Parse(source)
	if perrs, ok := errors.AsType[*policy.Errors](err); ok {
		writePolicyProblems(w, perrs.Problems)
		return
	} else if err != nil {
		writeError(w, errorf(http.StatusBadRequest, CodeInvalidPolicy, "%s", err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	line := func(l replayLine) {
		_ = enc.Encode(l)
		_ = rc.Flush()
	}
	ans, aerr := s.Replay(r.Context(), *principalFrom(r.Context()), cand, q, func(p ReplayProgress) { line(replayLine{Progress: &p}) })
	if aerr != nil {
		line(replayLine{Error: aerr})
		return
	}
	line(replayLine{Report: ans})
}

// parseReplayQuery reads since (default 30 days ago) and until (default
// now): RFC 3339 times or ages ("30d", "12h").
func parseReplayQuery(r *http.Request, now time.Time) (ReplayQuery, *Error) {
	q := ReplayQuery{Since: now.Add(-30 * 24 * time.Hour), Until: now}
	for name, at := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			*at = t
		} else if d, ok := parseAge(v); ok {
			*at = now.Add(-d)
		} else {
			return q, fieldError(http.StatusBadRequest, CodeInvalidParameter, name,
				"%s must be an RFC 3339 time or an age such as 30d, 12h or 90m, not %q", name, v)
		}
	}
	if !q.Since.Before(q.Until) {
		return q, fieldError(http.StatusBadRequest, CodeInvalidParameter, "since", "since must be before until")
	}
	q.Since, q.Until = q.Since.UTC(), q.Until.UTC()
	return q, nil
}

// Replay replays the requests created in q's window against cand, telling
// progress after each page. Examples are only of records p may read
// (approval.CanRead); the others are counted. Only admins and auditors may
// replay (forbidden).
func (s *Server) Replay(ctx context.Context, p Principal, cand *policy.Policy, q ReplayQuery, progress func(ReplayProgress)) (*ReplayAnswer, *Error) {
	if !p.Has(ReplayRoles...) {
		return nil, errorf(http.StatusForbidden, CodeForbidden, "replaying a policy is for admins and auditors")
	}
	opts := policy.ReplayOptions{}
	if s.cfg.Directory != nil {
		opts.Resolve = func(list []string) []string {
			ids, _ := s.cfg.Directory.Current().ResolveApprovers(list)
			return ids
		}
	}
	rp := policy.NewReplay(cand, opts)
	scanned, err := replayHistory(ctx, s.cfg.JS.Conn(), rp, p.Reader(), q, progress)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the replay was interrupted")
		}
		return nil, s.backendError("replay", err)
	}
	return &ReplayAnswer{Since: q.Since, Until: q.Until, Scanned: scanned, ReplayReport: rp.Report(), Sees: ReplaySees}, nil
}

// replayHistory feeds rp every record of the bucket created in q's window,
// page by page up to the stream's last message when it began, telling
// progress after each page. It returns how many record messages it read.
func replayHistory(ctx context.Context, nc *nats.Conn, rp *policy.Replay, reader approval.Reader, q ReplayQuery, progress func(ReplayProgress)) (uint64, error) {
	js, err := nc.JetStream(nats.Context(ctx))
	if err != nil {
		return 0, err
	}
	info, err := js.StreamInfo(events.RecordStream, nats.Context(ctx))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", events.RecordStream, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return 0, nil
	}
	var scanned uint64
	replayed := 0
	for from := first; from <= last; from += replayPage {
		to := min(from+replayPage-1, last)
		page, err := readRecordPage(ctx, nc, from, to)
		if err != nil {
			return scanned, err
		}
		for _, m := range page {
			scanned++
			if replayMessage(ctx, rp, reader, q, m) {
				replayed++
			}
		}
		if progress != nil {
			progress(ReplayProgress{Scanned: scanned, Total: info.State.Msgs, Replayed: replayed})
		}
	}
	return scanned, nil
}

// replayMessage replays one record message when it holds a record created
// in q's window; it reports whether it did.
func replayMessage(ctx context.Context, rp *policy.Replay, reader approval.Reader, q ReplayQuery, m *nats.Msg) bool {
	id, ok := strings.CutPrefix(m.Subject, recordSubjectPrefix)
	if !ok || deletion(m.Header) {
		return false
	}
	inWindow := func(t time.Time) bool { return !t.Before(q.Since) && t.Before(q.Until) }
	if sum, ok := events.ParseRecordHeader(m.Header); ok && !sum.CreatedAt.IsZero() && !inWindow(sum.CreatedAt) {
		return false // the headers answer without decoding
	}
	var rec contracts.Record
	if err := json.Unmarshal(m.Data, &rec); err != nil || !inWindow(rec.Request.CreatedAt) {
		return false
	}
	if rec.Request.EventID == "" {
		rec.Request.EventID = id
	}
	rp.Add(ctx, &rec, approval.CanRead(&rec, reader))
	return true
}

// readRecordPage reads the record messages stored at a sequence in [from,
// to] through a consumer on the bucket's stream that may have at most
// to-from+1 deliveries outstanding (they are never acknowledged): the
// server stops once it has sent the page. The consumer is the kind a
// bucket watch uses, so the API's grants cover it.
func readRecordPage(ctx context.Context, nc *nats.Conn, from, to uint64) ([]*nats.Msg, error) {
	js, err := nc.JetStream()
	if err != nil {
		return nil, err
	}
	n := int(to - from + 1)
	ch := make(chan *nats.Msg, n)
	sub, err := js.ChanSubscribe("", ch, nats.BindStream(events.RecordStream), nats.StartSequence(from),
		nats.AckExplicit(), nats.ManualAck(), nats.MaxAckPending(n), nats.InactiveThreshold(time.Minute), nats.Context(ctx))
	if err != nil {
		return nil, fmt.Errorf("read the records of %s: %w", events.RecordStream, err)
	}
	defer func() { go func() { _ = sub.Unsubscribe() }() }()
	if pending, err := sub.InitialConsumerPending(); err == nil && pending == 0 {
		return nil, nil
	}
	page := make([]*nats.Msg, 0, n)
	for {
		select {
		case m := <-ch:
			seq, pending, ok := ackPosition(m.Reply)
			if !ok {
				continue
			}
			if seq <= to {
				page = append(page, m)
			}
			if seq >= to || pending == 0 {
				return page, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

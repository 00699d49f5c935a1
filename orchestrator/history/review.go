package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/orchestrator/policy"
)

// maxAttempts bounds how often one review decides again after another
// gate recorded a call of its scope first.
const maxAttempts = 32

// ErrContended is a review that could not be recorded in order after
// maxAttempts: the gate then decides without the history (strictest).
var ErrContended = errors.New("history: the scope kept changing; the review could not be ordered")

// Call is a call under review.
type Call struct {
	// ID is the review's event id.
	ID        string
	Tool      string
	Run       contracts.Run
	Arguments json.RawMessage
}

// Decide decides the call with a view of the history before it and
// returns its verdict (contracts.HistoryAllowed, HistoryDenied or
// HistoryGated). It may run more than once; the last run is the one
// recorded.
type Decide func(h policy.History) string

// Review decides call with the history before it and records the call.
//
// Where use reads the history, the review is serialized per use.Scope:
// the fact is published with the expected last sequence of the scope's
// subject filter as the figures saw it; when another gate recorded a call
// of the scope in between, the store catches up and decides again. Where
// it does not, the fact is published without waiting for its
// acknowledgement. A call already recorded (a review of the same id) is
// not recorded again, and its own fact never counts in its figures.
func (s *Store) Review(ctx context.Context, call Call, use policy.HistoryUse, decide Decide) error {
	now := s.cfg.Now()
	fact := factOf(call, use, now)
	subject := contracts.HistorySubject(call.Run.Tenant, call.Run.ID, call.Run.Agent)
	if use.Scope == "" {
		fact.Verdict = decide(s.view(call, now))
		if !s.recorded(call.ID) {
			publishAsync(s.cfg.JS, s.cfg.Logger, subject, &fact)
		}
		return nil
	}
	// The figures count what the store holds: the history recorded before
	// it opened comes first (a policy that reads none needs none of it).
	if err := s.WaitCaughtUp(ctx); err != nil {
		return err
	}
	filter := contracts.HistoryFilter(use.Scope, call.Run.Tenant, call.Run.ID, call.Run.Agent)
	lock := &s.locks[stripe(filter)]
	lock.Lock()
	defer lock.Unlock()
	var floor uint64 // the filter's last sequence, as the server said
	for range maxAttempts {
		expect := max(floor, s.lastSeq(use.Scope, call))
		fact.Verdict = decide(s.view(call, now))
		if s.recorded(call.ID) {
			return nil
		}
		ack, err := s.publish(ctx, subject, &fact, expect, filter)
		if err == nil {
			return s.waitFor(ctx, ack.Sequence)
		}
		last, err := s.wrongLast(ctx, err, filter)
		if err != nil {
			return fmt.Errorf("history: record the call: %w", err)
		}
		if err := s.waitFor(ctx, last); err != nil {
			return err
		}
		floor = last
	}
	return ErrContended
}

// recorded reports whether the call's fact is in the store.
func (s *Store) recorded(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id] != nil
}

// lastSeq is the last sequence the store holds of the call's scope.
func (s *Store) lastSeq(scope string, call Call) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.scopes[keyOf(scope, call.Run)]
	if l == nil || len(l.es) == 0 {
		return 0
	}
	return l.es[len(l.es)-1].seq
}

func (s *Store) publish(ctx context.Context, subject string, f *contracts.HistoryFact, expect uint64, filter string) (*jetstream.PubAck, error) {
	data, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return s.cfg.JS.Publish(ctx, subject, data, jetstream.WithMsgID("fact:"+f.ID),
		jetstream.WithExpectLastSequenceForSubject(expect, filter))
}

// factOf is the fact of call reviewed at now, with the fields use sums.
func factOf(call Call, use policy.HistoryUse, now time.Time) contracts.HistoryFact {
	return contracts.HistoryFact{Spec: contracts.SpecHistoryFact, ID: call.ID, Tool: call.Tool, Agent: call.Run.Agent,
		Tenant: call.Run.Tenant, RunID: call.Run.ID, Fields: use.Fields, Values: values(call.Arguments, use.Fields), At: now}
}

// Record records call, reviewed at now with verdict, without a Store:
// for a gate whose policy reads no history, which keeps none in memory.
// It does not wait for the acknowledgement. A call recorded twice (a
// review of the same id) is one fact to every Store, which keeps the first.
func Record(js jetstream.JetStream, log *slog.Logger, call Call, verdict string, now time.Time) {
	fact := factOf(call, policy.HistoryUse{}, now)
	fact.Verdict = verdict
	publishAsync(js, log, contracts.HistorySubject(call.Run.Tenant, call.Run.ID, call.Run.Agent), &fact)
}

func publishAsync(js jetstream.JetStream, log *slog.Logger, subject string, f *contracts.HistoryFact) {
	data, err := json.Marshal(f)
	if err == nil {
		_, err = js.PublishAsync(subject, data, jetstream.WithMsgID("fact:"+f.ID))
	}
	if err != nil {
		log.Warn("history: record the call", "event_id", f.ID, "error", err)
	}
}

// wrongLast is, when err refused a publish for its expected last
// sequence, the filter's last sequence: as the error names it, or, on a
// replicated stream whose error names none, as the stream says.
func (s *Store) wrongLast(ctx context.Context, err error, filter string) (uint64, error) {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return 0, err
	}
	switch api.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence:
		if _, n, ok := strings.Cut(api.Description, ": "); ok {
			if seq, perr := strconv.ParseUint(strings.TrimSpace(n), 10, 64); perr == nil {
				return seq, nil
			}
		}
	case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
	default:
		return 0, err
	}
	m, gerr := s.stream.GetLastMsgForSubject(ctx, filter)
	if gerr != nil {
		return 0, errors.Join(err, gerr)
	}
	return m.Sequence, nil
}

func stripe(filter string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(filter))
	return int(h.Sum32() % 64)
}

func keyOf(scope string, r contracts.Run) scopeKey {
	switch scope {
	case contracts.HistoryScopeAgent:
		return scopeKey{scope, r.Tenant, r.Agent}
	case contracts.HistoryScopeRun:
		return scopeKey{scope, r.Tenant, r.ID}
	}
	return scopeKey{contracts.HistoryScopeTenant, r.Tenant, ""}
}

// values are the numeric values of the fields in args: a top-level name
// or an RFC 6901 pointer.
func values(args json.RawMessage, fields []string) map[string]float64 {
	if len(fields) == 0 {
		return nil
	}
	out := map[string]float64{}
	for _, f := range fields {
		ptr := f
		if !strings.HasPrefix(f, "/") {
			ptr = "/" + strings.ReplaceAll(strings.ReplaceAll(f, "~", "~0"), "/", "~1")
		}
		if v, ok := lookup(args, ptr); ok {
			out[f] = v
		}
	}
	return out
}

// lookup is the number at an RFC 6901 pointer into args.
func lookup(args json.RawMessage, ptr string) (float64, bool) {
	tokens, err := approval.ParsePointer(ptr)
	if err != nil {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return 0, false
	}
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			v = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return 0, false
			}
			v = x[i]
		default:
			return 0, false
		}
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// view is the history before one call, as the store holds it.
type view struct {
	s    *Store
	call Call
	now  time.Time
}

func (s *Store) view(call Call, now time.Time) policy.History {
	return &view{s: s, call: call, now: now}
}

// Figure counts, sums or looks for an approval over the facts of the
// call's scope within the window, the call's own fact left out. Calls
// the policy denied count in none of them.
func (v *view) Figure(q policy.HistoryQuery) (float64, error) {
	if q.Scope == contracts.HistoryScopeRun && v.call.Run.ID == "" {
		return 0, errors.New("the call has no run id")
	}
	start := v.now.Add(-q.Window)
	if q.Window > v.s.cfg.Horizon {
		return 0, ErrInexact
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.caughtUpLocked() {
		return 0, ErrCatchingUp
	}
	l := s.scopes[keyOf(q.Scope, v.call.Run)]
	if l == nil {
		return 0, nil
	}
	if !l.dropped.IsZero() && !start.After(l.dropped) {
		return 0, ErrInexact
	}
	var sum float64
	for _, e := range l.es {
		f := &e.f
		if f.ID == v.call.ID || f.At.Before(start) || f.Verdict == contracts.HistoryDenied || !policy.Match(q.Tools, f.Tool) {
			continue
		}
		switch q.Func {
		case policy.HistoryCount:
			sum++
		case policy.HistoryApproved:
			if f.Verdict == contracts.HistoryAllowed || e.approved {
				return 1, nil
			}
		case policy.HistorySum:
			if !contains(f.Fields, q.Field) {
				return 0, fmt.Errorf("a call in the window was recorded before the policy summed %q", q.Field)
			}
			sum += f.Values[q.Field]
		}
	}
	return sum, nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// View is the history before call as the store holds it now, for an
// explanation: nothing is recorded, and nothing serializes it with other
// reviews.
func (s *Store) View(call Call) policy.History { return s.view(call, s.cfg.Now()) }

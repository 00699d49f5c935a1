package arbiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// A vote or claim asked by request (serveVotes, serveClaims) is durable in
// the record it writes; its announcement and audit entry follow the write,
// and the asker stores the message on the stream when no answer comes, so
// an arbiter that stops in between is covered by the stored copy. When the
// asker stops too (serve runs every role in one process: kill -9 stops
// both), nothing stored brings the vote back, and the record would stay
// decided but unannounced. So at start the arbiter reads the headers of
// the records written in the last sweepWindow before the bucket's newest
// write (only arbiters write records: after a stop, those are the writes
// that were in hand), and announces, with its audit entry and grant, each
// decision among them that has no decided announcement yet.
const sweepWindow = 30 * time.Second

// announceUnannounced runs the start-up sweep; a failure is logged (the
// sweep is a safety net, not a step anything waits for).
func (a *Arbiter) announceUnannounced(ctx context.Context) {
	began := time.Now()
	n, err := a.sweepUnannounced(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		a.cfg.Logger.Warn("the start-up look for decisions left unannounced failed", "err", err)
	case n > 0:
		a.cfg.Logger.Warn("decisions left unannounced by a stop were announced", "count", n)
	default:
		a.cfg.Logger.Info("the start-up look for decisions left unannounced is done", "took", time.Since(began).Round(time.Millisecond))
	}
}

// sweepUnannounced announces the decisions of the sweep window that have
// no decided announcement, and returns how many it announced.
func (a *Arbiter) sweepUnannounced(ctx context.Context) (int, error) {
	decided, err := a.recentDecisions(ctx)
	if err != nil || len(decided) == 0 {
		return 0, err
	}
	evs, err := a.cfg.JS.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range decided {
		_, err := evs.GetLastMsgForSubject(ctx, contracts.DecidedSubject(id))
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, err
		}
		entry, err := a.kv.Get(ctx, id)
		if err != nil {
			return n, err
		}
		var rec contracts.Record
		if err := contracts.DecodeRecord(id, entry.Value(), &rec); err != nil || !rec.Terminal() {
			continue
		}
		if err := a.issueGrant(ctx, rec); err != nil {
			return n, err
		}
		if err := a.reannounce(ctx, rec, entry.Revision()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// recentDecisions is the records whose last write in the sweep window left
// them decided, by their summary headers.
func (a *Arbiter) recentDecisions(ctx context.Context) ([]string, error) {
	st, err := a.cfg.JS.Stream(ctx, events.RecordStream)
	if err != nil {
		return nil, err
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return nil, nil
	}
	start := state.LastTime.Add(-sweepWindow)
	// No filter: the stream holds records only (the API's start reads it
	// the same way).
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start, HeadersOnly: true,
	})
	if err != nil {
		return nil, err
	}
	// One continuous pull (Next alone asks for each message on its own:
	// 10 ms a message on a long history).
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	status := map[string]string{}
	for {
		// Bounded, and ended at once by the arbiter's stop.
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read the records written last: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		if s, ok := events.ParseRecordHeader(msg.Headers()); ok {
			status[strings.TrimPrefix(msg.Subject(), events.RecordSubject(""))] = s.Status
		}
		if md.Sequence.Stream >= state.LastSeq {
			break
		}
	}
	var decided []string
	for id, s := range status {
		if contracts.Terminal(s) {
			decided = append(decided, id)
		}
	}
	return decided, nil
}

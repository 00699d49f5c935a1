package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/countersign/countersign/contracts"
)

// inboxEvent is what the inbox page is told of a change: which request,
// and what happened (requested, changed, decided).
type inboxEvent struct {
	EventID string `json:"event_id"`
	Kind    string `json:"kind"`
	Status  string `json:"status,omitempty"`
}

// getEvents serves GET /inbox/events to a signed-in page: server-sent
// events naming each request that arrives, changes or is decided. It
// follows the same streams as GET /v1/events, and each event is sent once
// the records index holds the change, so the page's next fetch shows it.
func (in *inbox) getEvents(w http.ResponseWriter, r *http.Request) {
	sess, err := in.sessionOf(r)
	if err != nil {
		storeUnavailable(w)
		return
	}
	if sess == nil {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	s := in.s
	s.streamEvents(w, r, "retry: 2000\n: countersign inbox\n\n", func(ctx context.Context, m streamMsg) ([]byte, bool) {
		ev := inboxEvent{Kind: m.kind}
		if json.Unmarshal(m.data, &ev) != nil || !contracts.ValidEventID(ev.EventID) {
			return nil, false
		}
		ev.Kind = m.kind
		if m.kind == KindRequested {
			// The request is on the bus before the arbiter has made its
			// record: wait for the record, or the page's next fetch would
			// not show it and nothing would tell the page again.
			_, _, _, _ = s.watchRecord(ctx, ev.EventID, recordVisibleWait, func(*contracts.Record) bool { return true })
		}
		syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Second)
		_ = s.index.catchUp(syncCtx)
		cancelSync()
		data, _ := json.Marshal(ev)
		return data, true
	}, func(aerr *apiError) { http.Error(w, aerr.Message, aerr.Status) })
}

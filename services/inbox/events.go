package inbox

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
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
func (in *Inbox) getEvents(w http.ResponseWriter, r *http.Request) {
	sess, err := in.sessionOf(r)
	if err != nil {
		storeUnavailable(w)
		return
	}
	if sess == nil {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	in.api.Follow(w, r, sess.p, "retry: 2000\n: countersign inbox\n\n", func(ctx context.Context, c api.Change) ([]byte, bool) {
		var ev inboxEvent
		if json.Unmarshal(c.Data, &ev) != nil || !contracts.ValidEventID(ev.EventID) {
			return nil, false
		}
		ev.Kind = c.Kind
		if c.Kind == api.KindRequested {
			// The request is on the bus before the arbiter has made its
			// record: wait for the record, or the page's next fetch would
			// not show it and nothing would tell the page again.
			in.api.AwaitRecord(ctx, ev.EventID, recordAppearWait)
		}
		syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Second)
		_ = in.api.Settle(syncCtx)
		cancelSync()
		data, _ := json.Marshal(ev)
		return data, true
	})
}

// recordAppearWait is how long the feed holds a new request's event for the
// arbiter to create its record.
const recordAppearWait = 5 * time.Second

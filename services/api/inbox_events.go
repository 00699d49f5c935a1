package api

import (
	"context"
	"encoding/json"
	"fmt"
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
	if in.sessionOf(r) == nil {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	s := in.s
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	msgs := make(chan streamMsg, 64)
	var stops []func()
	defer func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
	}()
	sources := []struct {
		stream  string
		filters []string
	}{
		{contracts.StreamRequests, []string{contracts.SubjectToolRequestedPrefix + ">", contracts.SubjectInputRequestedPrefix + ">"}},
		{contracts.StreamEvents, []string{contracts.SubjectDecidedPrefix + ">", contracts.SubjectChangedPrefix + ">"}},
	}
	for _, src := range sources {
		stop, err := s.follow(ctx, src.stream, src.filters, msgs)
		if err != nil {
			aerr := s.backendError("follow "+src.stream, err)
			http.Error(w, aerr.Message, aerr.Status)
			return
		}
		stops = append(stops, stop)
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n: countersign inbox\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	for {
		select {
		case m := <-msgs:
			ev := inboxEvent{Kind: m.kind}
			if json.Unmarshal(m.data, &ev) != nil || !contracts.ValidEventID(ev.EventID) {
				continue
			}
			ev.Kind = m.kind
			syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Second)
			_ = s.index.catchUp(syncCtx)
			cancelSync()
			data, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", m.kind, m.id, data); err != nil {
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

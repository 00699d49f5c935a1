package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier/push"
)

// SurfacePush is where an opening through a push notification's action is
// recorded.
const SurfacePush = "push"

// getPushKey answers GET /v1/push/key.
func (s *Server) getPushKey(w http.ResponseWriter, r *http.Request) {
	key, ok := s.PushKey()
	if !ok {
		writeError(w, errorf(http.StatusNotFound, CodePushOff, "push notifications are not set up on this server (notify.push)"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"public_key": key})
}

// postPushSubscription answers POST /v1/push/subscriptions.
func (s *Server) postPushSubscription(w http.ResponseWriter, r *http.Request) {
	var body PushSubscription
	if aerr := decodeBody(w, r, &body, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	d, aerr := s.SubscribePush(r.Context(), *principalFrom(r.Context()), body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusCreated, shownDevice(d))
}

// getPushSubscriptions answers GET /v1/push/subscriptions.
func (s *Server) getPushSubscriptions(w http.ResponseWriter, r *http.Request) {
	devs, aerr := s.PushDevices(r.Context(), *principalFrom(r.Context()))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"devices": devs})
}

// deletePushSubscription answers DELETE /v1/push/subscriptions/{id}.
func (s *Server) deletePushSubscription(w http.ResponseWriter, r *http.Request) {
	if aerr := s.RemovePushDevice(r.Context(), *principalFrom(r.Context()), r.PathValue("id")); aerr != nil {
		writeError(w, aerr)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pushActionAnswer is what POST /v1/push/actions answers when the vote
// counted or is in flight.
type pushActionAnswer struct {
	Result string `json:"result"` // counted, in_flight
	Status string `json:"status,omitempty"`
}

// postPushAction answers POST /v1/push/actions {token}: the one-tap action
// of a notification votes as the person it was made out to, through the
// path every channel's votes take. The token is the authority (no bearer
// token): signed, for one person, one request, one decision and the
// arguments the notification showed, until the request's deadline; its
// vote id comes from it, so a second tap counts nothing more.
func (s *Server) postPushAction(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if aerr := decodeBody(w, r, &body, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	a, aerr := s.PushAction(r.Context(), body.Token)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	res, err := s.Resolver().Vote(r.Context(), contracts.Vote{Spec: contracts.SpecVote, VoteID: push.VoteID(a), EventID: a.EventID,
		Decision: a.Decision, Approver: contracts.Approver{ID: a.Approver, Via: contracts.ViaPush}, ArgumentsSHA256: a.ArgumentsSHA256})
	if err != nil {
		s.log.Error("push action vote failed", "event_id", a.EventID, "err", err)
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the vote could not be cast; open the request in the inbox"))
		return
	}
	switch {
	case res.InFlight:
		writeJSON(w, http.StatusAccepted, pushActionAnswer{Result: "in_flight"})
	case res.Refused != "":
		e := refusal(res.Refused)
		if res.Detail != "" {
			e.Message += " (" + res.Detail + ")"
		}
		writeError(w, e)
	default:
		writeJSON(w, http.StatusOK, pushActionAnswer{Result: "counted", Status: res.Record.Status})
	}
}

// PushAction verifies a one-tap action's token and records that its person
// opened the approval (so a staggered notification stops chasing them).
func (s *Server) PushAction(ctx context.Context, token string) (push.Action, *Error) {
	if s.cfg.Push.Actions == nil {
		return push.Action{}, errorf(http.StatusNotFound, CodePushOff, "push actions are not set up on this server (notify.push)")
	}
	a, err := s.cfg.Push.Actions.Verify(token, s.cfg.Now())
	switch {
	case errors.Is(err, push.ErrTokenExpired):
		return push.Action{}, fieldError(http.StatusForbidden, CodeInvalidToken, "token", "the action has expired with its request; open the inbox")
	case err != nil:
		return push.Action{}, fieldError(http.StatusForbidden, CodeInvalidToken, "token", "not a valid push action")
	}
	s.recordOpening(ctx, SurfacePush, a.Approver, a.EventID)
	return a, nil
}

// recordOpening records on hitl.approval.read.<event_id> that person
// opened the approval (contracts.ReadOpened), once per reader, surface and
// ten minutes, for the staggered notification and the timeline. A failure
// is logged.
func (s *Server) recordOpening(ctx context.Context, surface, person, eventID string) {
	now := s.cfg.Now().UTC()
	read := contracts.Read{Spec: contracts.SpecRead, EventID: eventID, Reader: person, Surface: surface, What: contracts.ReadOpened, At: now}
	msgID := "opened:" + eventID + ":" + person + ":" + surface + ":" + strconv.FormatInt(now.Unix()/int64(readAuditWindow/time.Second), 10)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := events.Publish(ctx, s.cfg.JS, contracts.ReadSubject(eventID), read, msgID, nil); err != nil {
		s.log.Error("the opening of an approval could not be recorded", "event_id", eventID, "reader", person, "err", err)
	}
}

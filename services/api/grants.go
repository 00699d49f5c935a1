package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// Standing grants over HTTP: list, show, revoke, and the grant's timeline.
// A grant's id is the event id of the approval that issued it, and a
// grant is visible to whoever may read that approval.

// CodeUnknownGrant: no grant has this id (or the caller may not see it).
const CodeUnknownGrant = contracts.ReasonUnknownGrant

// GrantView is a grant as the API shows it: the stored grant and its
// status now (active, expired, revoked).
type GrantView struct {
	contracts.Grant
	Status string `json:"status"`
}

type grantList struct {
	Grants []GrantView `json:"grants"`
}

// grantView is g with its status at now.
func (s *Server) grantView(g contracts.Grant) GrantView {
	return GrantView{Grant: g, Status: g.Status(s.cfg.Now())}
}

// Grants lists the grants p may see, newest first, filtered by status
// ("" or "all": every status), agent and tool. The inbox lists through it.
func (s *Server) Grants(ctx context.Context, p *Principal, status, agent, tool string) []GrantView {
	all := s.cfg.Gate.Grants().List()
	out := make([]GrantView, 0, len(all))
	for _, g := range all {
		v := s.grantView(g)
		if status != "" && status != "all" && v.Status != status || agent != "" && g.Agent != agent || tool != "" && g.Tool != tool {
			continue
		}
		if !s.mayRead(ctx, p, g.GrantID) {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b GrantView) int { return b.GrantedAt.Compare(a.GrantedAt) })
	return out
}

// Grant reads one grant from the bucket, if p may see it.
func (s *Server) Grant(ctx context.Context, p *Principal, id string) (GrantView, *Error) {
	if !contracts.ValidEventID(id) {
		return GrantView{}, fieldError(http.StatusBadRequest, CodeInvalidEventID, "grant_id", "grant_id is not a valid id")
	}
	g, err := s.cfg.Gate.Grants().Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return GrantView{}, errorf(http.StatusNotFound, CodeUnknownGrant, "grant %s does not exist", id)
	}
	if err != nil {
		return GrantView{}, s.backendError("read grant", err)
	}
	if _, _, aerr := s.readableRecord(ctx, p, id); aerr != nil {
		return GrantView{}, errorf(http.StatusNotFound, CodeUnknownGrant, "grant %s does not exist", id)
	}
	return s.grantView(g), nil
}

// RevokeGrant revokes a grant as p (an admin, or an approver of the
// approval that issued it) and waits for the arbiter to store the
// revocation; from then on no gate lets the grant allow a call.
func (s *Server) RevokeGrant(ctx context.Context, p *Principal, id string) (GrantView, *Error) {
	v, aerr := s.Grant(ctx, p, id)
	if aerr != nil {
		return v, aerr
	}
	rec, _, aerr := s.readableRecord(ctx, p, id)
	if aerr != nil {
		return v, aerr
	}
	if !p.Has(RoleAdmin) && !(p.Has(RoleApprover) && commandRefusal(p, rec, contracts.CommandExtend) == "") {
		return v, errorf(http.StatusForbidden, CodeForbidden, "only an admin or an approver of the approval that issued a grant may revoke it")
	}
	if v.Revoked != nil {
		return v, nil
	}
	kv, err := s.cfg.JS.KeyValue(ctx, contracts.BucketGrants)
	if err != nil {
		return v, s.backendError("open grants", err)
	}
	wctx, cancel := context.WithTimeout(ctx, arbiterWait)
	defer cancel()
	watch, err := kv.Watch(wctx, id)
	if err != nil {
		return v, s.backendError("watch grant", err)
	}
	defer func() { _ = watch.Stop() }()
	cmd := s.newCommand(id, contracts.CommandRevokeGrant, p)
	if _, err := events.Publish(ctx, s.cfg.JS, contracts.CommandSubject(id), cmd, cmd.CommandID, nil); err != nil {
		return v, s.backendError("publish revocation", err)
	}
	s.log.Info("grant revocation", "grant_id", id, "by", p.Subject, "token_name", p.Name)
	for {
		select {
		case e := <-watch.Updates():
			if e == nil {
				continue
			}
			var g contracts.Grant
			if contracts.Decode(e.Value(), &g) == nil && g.Revoked != nil {
				return s.grantView(g), nil
			}
		case <-wctx.Done():
			return v, errorf(http.StatusAccepted, "in_flight", "the revocation was sent; the arbiter has not stored it yet")
		}
	}
}

// GrantTimeline is the grant's timeline: issued, every use, revoked.
func (s *Server) GrantTimeline(ctx context.Context, p *Principal, id string) (Timeline, *Error) {
	if _, aerr := s.Grant(ctx, p, id); aerr != nil {
		return Timeline{}, aerr
	}
	st, err := s.events.Get(ctx)
	if err != nil {
		return Timeline{}, s.backendError("read grant timeline", err)
	}
	msgs, truncated, err := events.ReadSubjects(ctx, st, []string{
		contracts.GrantIssuedSubject(id), contracts.GrantUsedSubject(id), contracts.GrantRevokedSubject(id),
	}, maxTimelineEvents)
	if err != nil {
		return Timeline{}, s.backendError("read grant timeline", err)
	}
	ans := Timeline{Events: make([]TimelineEvent, 0, len(msgs)), Truncated: truncated}
	for _, m := range msgs {
		kind := strings.TrimPrefix(m.Subject, contracts.SubjectGrantPrefix)
		kind, _, _ = strings.Cut(kind, ".")
		ev := TimelineEvent{Kind: "grant_" + kind, Subject: m.Subject, Data: json.RawMessage(m.Data), At: m.Time.UTC(), Seq: m.Sequence}
		if !json.Valid(ev.Data) {
			ev.Data = json.RawMessage("null")
		}
		ans.Events = append(ans.Events, ev)
	}
	return ans, nil
}

func (s *Server) listGrants(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := q.Get("status")
	switch status {
	case "", "all", contracts.GrantActive, contracts.GrantExpired, contracts.GrantRevoked:
	default:
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidParameter, "status", "status must be active, expired, revoked or all"))
		return
	}
	writeJSON(w, http.StatusOK, grantList{Grants: s.Grants(r.Context(), principalFrom(r.Context()), status, q.Get("agent"), q.Get("tool"))})
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request) {
	v, aerr := s.Grant(r.Context(), principalFrom(r.Context()), r.PathValue("grant_id"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) postRevokeGrant(w http.ResponseWriter, r *http.Request) {
	var body struct{}
	if aerr := decodeBody(w, r, &body, true); aerr != nil {
		writeError(w, aerr)
		return
	}
	v, aerr := s.RevokeGrant(r.Context(), principalFrom(r.Context()), r.PathValue("grant_id"))
	if aerr != nil {
		if aerr.Status == http.StatusAccepted {
			writeJSON(w, http.StatusAccepted, inFlightAnswer{Status: "in_flight"})
			return
		}
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) getGrantTimeline(w http.ResponseWriter, r *http.Request) {
	t, aerr := s.GrantTimeline(r.Context(), principalFrom(r.Context()), r.PathValue("grant_id"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// grantProblem says why the request's rule does not permit the grant a
// vote asks for, or why its condition cannot be used ("" when it can), as
// the arbiter will judge it.
func grantProblem(req *contracts.ApprovalRequested, v *contracts.Vote) string {
	if v.Grant == nil {
		return ""
	}
	approving := v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit
	if !approving && v.Grant.Scope != "" && v.Grant.Scope != contracts.GrantScopeCall {
		return "grant: only an approval or an edit can grant"
	}
	if why := approval.CheckGrantRequest(req, v.Grant); why != "" {
		return why
	}
	if v.Grant.Arguments == contracts.GrantArgumentsCondition {
		if _, err := policy.CompileGrantCondition(v.Grant.Condition); err != nil {
			return "grant/condition: " + err.Error()
		}
	}
	return ""
}

// grantRefusal answers a grant the rule does not permit: 403
// grant_not_allowed, saying why, with the field.
func grantRefusal(why string) *Error {
	field, _, _ := strings.Cut(why, ":")
	return fieldError(http.StatusForbidden, contracts.ReasonGrantNotAllowed, field, "%s", why)
}

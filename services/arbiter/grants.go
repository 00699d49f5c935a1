package arbiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// This file is the arbiter's side of standing grants: it writes a grant
// when a decision that met the quorum asked for one (approval.IssueGrant),
// and applies revocations. It is the only writer of hitl_grants.

type grantMetrics struct {
	issued  *prometheus.CounterVec
	revoked *prometheus.CounterVec
}

func newGrantMetrics(reg prometheus.Registerer) grantMetrics {
	m := grantMetrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_grants_issued_total", Help: "Standing grants issued by approvals that met their quorum, by rule.",
		}, []string{"rule"}),
		revoked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_grants_revoked_total", Help: "Standing grants revoked, by rule.",
		}, []string{"rule"}),
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.revoked)
	}
	return m
}

// grantConditionProblem says why a vote's grant condition cannot be used
// ("" when it compiles, or the vote asks for none).
func grantConditionProblem(v *contracts.Vote) string {
	if v.Grant == nil || v.Grant.Arguments != contracts.GrantArgumentsCondition || v.Grant.Condition == "" {
		return ""
	}
	if _, err := policy.CompileGrantCondition(v.Grant.Condition); err != nil {
		return "grant/condition: " + err.Error()
	}
	return ""
}

// issueGrant records the issue of the grant the approved record issues, if
// any, in the grant's timeline, and writes the grant. Both steps are
// idempotent: a redelivered decision writes nothing new and publishes a
// duplicate.
func (a *Arbiter) issueGrant(ctx context.Context, rec contracts.Record) error {
	g, ok := approval.IssueGrant(rec)
	if !ok {
		return nil
	}
	if !a.cfg.Now().Before(g.ExpiresAt) {
		return nil // expired before it could be written (a very late redelivery)
	}
	data, err := contracts.Marshal(g)
	if err != nil {
		return events.Poison(err)
	}
	// The issue is recorded before the grant is written, so that no use of
	// it (recorded by the gates that see it in the bucket) comes before its
	// issue in its timeline. A redelivery publishes a duplicate, which the
	// stream drops, and writes the grant if the first attempt did not.
	ev := contracts.GrantEvent{
		Spec: contracts.SpecGrantEvent, GrantID: g.GrantID, Event: contracts.GrantEventIssued, By: g.GrantedBy,
		RunID: rec.Request.Run.ID, ToolCallID: rec.Request.ToolCall.ID, Tool: g.Tool,
		ArgumentsSHA256: rec.Outcome.ArgumentsSHA256, Grant: data, At: g.GrantedAt,
	}
	if err := a.auditGrant(ctx, audit.ChangeGrantIssued, &g, rec.Request.EventID, g.GrantedBy, g.GrantedAt); err != nil {
		return err
	}
	if _, err := events.Publish(ctx, a.cfg.JS, contracts.GrantIssuedSubject(g.GrantID), ev, "grant-issued:"+g.GrantID, nil); err != nil {
		return err
	}
	kv, err := a.grantsBucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, g.GrantID, data); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
	} else {
		a.gm.issued.WithLabelValues(g.Policy.Rule).Inc()
		a.cfg.Logger.Info("grant issued", "grant_id", g.GrantID, "rule", g.Policy.Rule, "scope", g.Scope,
			"arguments", g.Arguments, "granted_by", g.GrantedBy, "expires_at", g.ExpiresAt)
	}
	return nil
}

// grantsBucket opens hitl_grants once.
func (a *Arbiter) grantsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	a.grantsMu.Lock()
	defer a.grantsMu.Unlock()
	if a.grants != nil {
		return a.grants, nil
	}
	kv, err := a.cfg.JS.KeyValue(ctx, contracts.BucketGrants)
	if err != nil {
		return nil, fmt.Errorf("arbiter: open bucket %s: %w", contracts.BucketGrants, err)
	}
	a.grants = kv
	return kv, nil
}

// revokeGrant applies a revoke_grant command with compare-and-set, and
// records the revocation in the grant's timeline. A revocation of a grant
// that is already revoked changes nothing; of one that does not exist is
// refused (announced on the approval's changed subject).
func (a *Arbiter) revokeGrant(ctx context.Context, msg jetstream.Msg, c contracts.Command) error {
	kv, err := a.grantsBucket(ctx)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		entry, err := kv.Get(ctx, c.EventID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			a.m.refused.WithLabelValues(contracts.ReasonUnknownGrant).Inc()
			return a.publishChanged(ctx, c.EventID, &contracts.Changed{
				Change: ChangeGrantRevokeRefused, By: c.By, Reason: contracts.ReasonUnknownGrant,
			}, 0, msgKey(msg))
		}
		if err != nil {
			return err
		}
		var g contracts.Grant
		if err := contracts.Decode(entry.Value(), &g); err != nil {
			return events.Poison(fmt.Errorf("grant %s is unreadable: %w", c.EventID, err))
		}
		next, changed := approval.RevokeGrant(g, c, a.cfg.Now())
		if changed {
			data, err := contracts.Marshal(next)
			if err != nil {
				return events.Poison(err)
			}
			if _, err := events.UpdateKey(ctx, a.cfg.JS, contracts.BucketGrants, c.EventID, data, entry.Revision()); err != nil {
				if (errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err)) && attempt < 50 {
					a.m.conflict.Inc()
					continue
				}
				return err
			}
			a.gm.revoked.WithLabelValues(g.Policy.Rule).Inc()
			a.cfg.Logger.Info("grant revoked", "grant_id", g.GrantID, "rule", g.Policy.Rule, "by", c.By)
		}
		r := next.Revoked
		ev := contracts.GrantEvent{
			Spec: contracts.SpecGrantEvent, GrantID: g.GrantID, Event: contracts.GrantEventRevoked,
			By: []string{r.By}, Tool: g.Tool, At: r.At,
		}
		if err := a.auditGrant(ctx, audit.ChangeGrantRevoked, &g, "", ev.By, r.At); err != nil {
			return err
		}
		_, err = events.Publish(ctx, a.cfg.JS, contracts.GrantRevokedSubject(g.GrantID), ev, "grant-revoked:"+g.GrantID, nil)
		return err
	}
}

// ChangeGrantRevokeRefused announces a revocation of a grant that does not
// exist, on the approval's changed subject.
const ChangeGrantRevokeRefused = "grant_revoke_refused"

// handleGrantUse logs a use of a standing grant, as a gate recorded it on
// the grant's timeline, in the audit log: the call it allowed (run and
// tool call), the agent, when; a use the grant could not have allowed is
// logged as audit.ChangeGrantUseRefused. A redelivered use is logged once.
func (a *Arbiter) handleGrantUse(ctx context.Context, msg jetstream.Msg) error {
	var ev contracts.GrantEvent
	if err := contracts.Decode(msg.Data(), &ev); err != nil {
		return events.Poison(fmt.Errorf("decode grant use: %w", err))
	}
	if ev.Event != contracts.GrantEventUsed || ev.GrantID == "" || msg.Subject() != contracts.GrantUsedSubject(ev.GrantID) {
		return events.Poison(fmt.Errorf("not a grant use of its subject %s", msg.Subject()))
	}
	e := audit.Entry{Change: audit.ChangeGrantUsed, GrantID: ev.GrantID, RunID: ev.RunID, ToolCallID: ev.ToolCallID, At: ev.At}
	if len(ev.By) == 1 {
		e.By = ev.By[0]
	}
	kv, err := a.grantsBucket(ctx)
	if err != nil {
		return err
	}
	entry, err := kv.Get(ctx, ev.GrantID)
	var g contracts.Grant
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e.Change, e.Reason = audit.ChangeGrantUseRefused, contracts.ReasonUnknownGrant
	case err != nil:
		return err
	case contracts.Decode(entry.Value(), &g) != nil:
		return events.Poison(fmt.Errorf("grant %s is unreadable", ev.GrantID))
	default:
		e.Tenant = g.Tenant
		if e.By != g.Agent || ev.Tool != g.Tool || g.Scope == contracts.GrantScopeRun && ev.RunID != g.RunID {
			e.Change, e.Reason = audit.ChangeGrantUseRefused, audit.ReasonGrantUseMismatch
		}
	}
	return a.appendAudit(ctx, &e, e.Change+":"+ev.GrantID+":"+ev.RunID+":"+ev.ToolCallID)
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/arbiter"
)

// timerProbes is how many short-deadline requests measure the wake-up lag
// while the pending approvals' timers are held.
const timerProbes = 200

// TimerReport is how a node holds timers: every pending approval has a
// durable expiry schedule on HITL_TIMERS; probes with short deadlines,
// added while they are all held, measure how late an expiry is applied.
type TimerReport struct {
	// Held is the number of schedules stored on HITL_TIMERS when the probes
	// were added (one per pending approval), Bytes their storage.
	Held  uint64 `json:"held"`
	Bytes uint64 `json:"bytes"`
	// Probes is the number of probe requests; Expired how many expired.
	Probes  int `json:"probes"`
	Expired int `json:"expired"`
	// Lag is the expiry's decided_at minus its deadline, in milliseconds:
	// the server's schedule firing (whole seconds) plus the arbiter
	// applying it.
	LagP50 float64 `json:"lag_p50_ms"`
	LagP99 float64 `json:"lag_p99_ms"`
	LagMax float64 `json:"lag_max_ms"`
}

// measureTimers publishes timerProbes requests that expire within a few
// seconds, spread over whole seconds so the schedule's one-second
// granularity adds nothing, and measures when the arbiter expired each.
// Nothing else may be deciding meanwhile: every decided event is a probe's.
// It first waits until the pending approvals' schedules are held (the
// arbiter writes them a moment after each record: DeferTimers).
func measureTimers(ctx context.Context, st *stack, pending int) (*TimerReport, error) {
	// The probes are requests an agent publishes; the timer stream's size
	// and the decided events are read as admin (no role reads both).
	js := st.agentJS
	_, admin, err := st.connect(roleRaw)
	if err != nil {
		return nil, err
	}
	info, err := heldSchedules(ctx, admin, pending)
	if err != nil {
		return nil, err
	}
	rep := &TimerReport{Held: info.Msgs, Bytes: info.Bytes, Probes: timerProbes}
	cons, err := admin.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.SubjectDecidedPrefix + ">"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return rep, err
	}
	now := time.Now().UTC()
	first := now.Truncate(time.Second).Add(3 * time.Second)
	deadlines := map[string]time.Time{}
	prefix := "tprobe-" + uuid.NewString()[:8]
	for i := range timerProbes {
		id := fmt.Sprintf("%s-%d", prefix, i)
		deadline := first.Add(time.Duration(i%5) * time.Second)
		deadlines[id] = deadline
		req := probeRequest(id, now, deadline)
		if _, err := events.Publish(ctx, js, contracts.ToolRequestedSubject(req.Run.Agent), req, id, nil); err != nil {
			return rep, fmt.Errorf("probe: %w", err)
		}
	}
	var lags []time.Duration
	limit := time.Now().Add(time.Minute)
	for len(lags) < timerProbes && time.Now().Before(limit) {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(limit)))
		if err != nil {
			break
		}
		var d contracts.Decided
		if json.Unmarshal(m.Data(), &d) != nil {
			continue
		}
		if at, ok := deadlines[d.EventID]; ok && d.Status == contracts.StatusExpired {
			lags = append(lags, d.DecidedAt.Sub(at))
			delete(deadlines, d.EventID)
		}
	}
	rep.Expired = len(lags)
	if len(lags) == 0 {
		return rep, fmt.Errorf("no probe expired")
	}
	slices.Sort(lags)
	rep.LagP50, rep.LagP99, rep.LagMax = ms(percentile(lags, 0.50)), ms(percentile(lags, 0.99)), ms(lags[len(lags)-1])
	if rep.Expired < timerProbes {
		return rep, fmt.Errorf("%d of %d probes expired within a minute", rep.Expired, timerProbes)
	}
	return rep, nil
}

func probeRequest(id string, created, deadline time.Time) contracts.ApprovalRequested {
	args := json.RawMessage(`{"probe":true}`)
	sum, _ := contracts.ArgumentsSHA256(args)
	return contracts.ApprovalRequested{
		Spec: contracts.SpecApprovalRequested, EventID: id, Kind: contracts.KindToolApproval,
		Run:      contracts.Run{ID: id, Agent: "timer-probe"},
		ToolCall: &contracts.ToolCall{ID: "probe", Name: "bench.probe", Arguments: args, ArgumentsSHA256: sum},
		Risk:     contracts.RiskLow, Summary: "timer probe",
		// Decided by the built-in policy, which the arbiter checks it against.
		Policy:     contracts.PolicyRef{Rule: "default", Version: policy.BuiltinVersion},
		Quorum:     contracts.Quorum{Required: 1, Approvers: []string{"nobody"}, Veto: true, Order: contracts.OrderAny},
		Escalation: []contracts.EscalationTier{}, Reminders: []string{},
		AllowedDecisions: []string{contracts.DecisionApprove, contracts.DecisionReject}, Channels: []string{},
		ExpiresAt: deadline, OnTimeout: contracts.OnTimeoutReject, CreatedAt: created,
	}
}

// heldSchedules waits until HITL_TIMERS holds at least n messages, or a
// while past the arbiter's timer delay, and returns its state.
func heldSchedules(ctx context.Context, admin jetstream.JetStream, n int) (jetstream.StreamState, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(arbiter.DefaultDeferTimers + 30*time.Second)
	for {
		st, err := admin.Stream(ctx, contracts.StreamTimers)
		if err != nil {
			return jetstream.StreamState{}, err
		}
		state := st.CachedInfo().State
		if state.Msgs >= uint64(n) {
			return state, nil
		}
		select {
		case <-tick.C:
		case <-limit:
			return state, nil
		case <-ctx.Done():
			return state, ctx.Err()
		}
	}
}

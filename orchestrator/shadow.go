package orchestrator

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/orchestrator/policy"
)

// shadowMetrics count what the policy's shadow rules would have decided:
// every call a shadow rule matched before the enforcing decision, and
// those where it would have changed the verdict (from the enforced
// action to its own).
type shadowMetrics struct {
	evaluations *prometheus.CounterVec
	flips       *prometheus.CounterVec
}

func newShadowMetrics(reg prometheus.Registerer) shadowMetrics {
	m := shadowMetrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_policy_shadow_evaluations_total",
			Help: "Calls a shadow rule matched before the enforcing decision (it recorded a verdict), by rule.",
		}, []string{"rule"}),
		flips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_policy_shadow_flips_total",
			Help: "Calls whose verdict a shadow rule would have changed, by rule, enforced action (from) and the shadow rule's (to).",
		}, []string{"rule", "from", "to"}),
	}
	if reg != nil {
		m.evaluations = registerCounter(reg, m.evaluations)
		m.flips = registerCounter(reg, m.flips)
	}
	return m
}

// registerCounter registers c, or returns the one registered before it.
func registerCounter(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}

// count counts the shadow verdicts of one call decided d.
func (m shadowMetrics) count(d policy.Decision, vs []policy.ShadowVerdict) {
	for _, v := range vs {
		m.evaluations.WithLabelValues(v.Rule).Inc()
		if v.Flips(d) {
			m.flips.WithLabelValues(v.Rule, d.Action, v.Decision.Action).Inc()
		}
	}
}

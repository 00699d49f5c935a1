package dispatch

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	notifications *prometheus.CounterVec
	attempts      *prometheus.CounterVec
	seconds       *prometheus.HistogramVec
	held          *prometheus.CounterVec
	// decision is the time from request to outcome by the channel of the
	// deciding vote (notifier.DecisionChannel).
	decision *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_notifications_total",
			Help: "Notifications by channel, kind (requested, reminder, escalation, decided, held) and result (delivered, failed, already_delivered, obsolete, unconfigured, unroutable, unreadable, held; quiet: kept for the end of its person's quiet hours).",
		}, []string{"channel", "kind", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_notification_attempts_total",
			Help: "Delivery attempts by channel and result (ok, transient, permanent).",
		}, []string{"channel", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_notification_attempt_seconds",
			Help:    "Duration of one delivery attempt by channel.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"channel"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_notifications_held_total",
			Help: "Requests, reminders and escalations not sent because their destination reached the fan-out cap (they wait in the inbox), by channel.",
		}, []string{"channel"}),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_time_to_decision_seconds",
			Help:    "Time from a request to its outcome, by the channel of the deciding vote (web, slack, email, push, api, cli, nats; timeout; cancelled).",
			Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600},
		}, []string{"channel"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.notifications, err = register(reg, m.notifications); err != nil {
		return nil, err
	}
	if m.attempts, err = register(reg, m.attempts); err != nil {
		return nil, err
	}
	if m.seconds, err = register(reg, m.seconds); err != nil {
		return nil, err
	}
	if m.held, err = register(reg, m.held); err != nil {
		return nil, err
	}
	if m.decision, err = register(reg, m.decision); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (two dispatchers in one process share their metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

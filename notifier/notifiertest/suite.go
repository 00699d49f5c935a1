package notifiertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// behaviour is one subtest of the suite.
type behaviour struct {
	name string
	test func(*run)
}

// behaviours are the suite, in the order they run.
var behaviours = []behaviour{
	{"Name", testName},
	{"RequestReachesItsTarget", testRequestReachesItsTarget},
	{"RequestShowsTheApproval", testRequestShowsTheApproval},
	{"OutcomeLandsWhereTheRequestWasShown", testOutcomeLandsWhereTheRequestWasShown},
	{"OutcomeWithoutRefReachesItsTarget", testOutcomeWithoutRefReachesItsTarget},
	{"RemindersAndEscalationsAreNewNotifications", testRemindersAndEscalationsAreNew},
	{"RedeliveryIsOneNotification", testRedeliveryIsOneNotification},
	{"PermanentRefusalIsPermanent", testPermanentRefusal},
	{"TransientRefusalIsRetried", testTransientRefusal},
	{"UnreachableIsTransient", testUnreachable},
	{"CancelledContextDeliversNothing", testCancelledContext},
	{"UndeliverableTargetIsPermanent", testUndeliverableTarget},
	{"WrongKindIsRefused", testWrongKind},
	{"NoSecretIsShown", testNoSecretIsShown},
}

// TestChannel runs the conformance suite against the channel h builds, one
// subtest per behaviour, each with a channel and receiving side of its own.
func TestChannel(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("notifiertest: Harness.New is required")
	}
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) { b.test(newRun(t, h)) })
	}
}

// run is one behaviour's channel and what the suite saw of it.
type run struct {
	*testing.T
	h    Harness
	s    Setup
	ch   notifier.Channel
	name string
	logs *Logs
}

func newRun(t *testing.T, h Harness) *run {
	t.Helper()
	logs := &Logs{}
	s := h.New(t, Env{Now: func() time.Time { return suiteNow }, Logger: logs.Logger(), PublicURL: suiteURL})
	if s.Channel == nil || s.Received == nil || s.Fail == nil || s.Stop == nil {
		t.Fatal("notifiertest: the Setup lacks Channel, Received, Fail or Stop")
	}
	if len(s.Secrets) == 0 {
		t.Fatal("notifiertest: the Setup names no secret; every channel has a credential to keep")
	}
	for _, secret := range s.Secrets {
		if len(secret) < 8 {
			t.Fatalf("notifiertest: secret %q is too short to be told apart from ordinary text", secret)
		}
	}
	if s.Targets[0].Address == s.Targets[1].Address {
		t.Fatalf("notifiertest: the two targets are one address, %q", s.Targets[0].Address)
	}
	return &run{T: t, h: h, s: s, ch: s.Channel, name: s.Targets[0].Channel, logs: logs}
}

// req is the run's n-th approval.
func (r *run) req(n int) contracts.ApprovalRequested { return request(n, r.name) }

// target is the run's i-th target.
func (r *run) target(i int) notifier.Target { return r.s.Targets[i] }

func (r *run) received() []Delivery { return r.s.Received() }

// after returns what the receiving side accepted while f ran.
func (r *run) after(f func()) []Delivery {
	r.Helper()
	before := len(r.received())
	f()
	all := r.received()
	if len(all) < before {
		r.Fatalf("the receiving side forgot deliveries: %d, then %d", before, len(all))
	}
	return all[before:]
}

// deliver calls Notify, or Update for a KindDecided notification.
func (r *run) deliver(ctx context.Context, n notifier.Notification) (notifier.Receipt, error) {
	if n.Kind == notifier.KindDecided {
		return r.ch.Update(ctx, n)
	}
	return r.ch.Notify(ctx, n)
}

// delivered delivers n and fails the test unless it is delivered, as one
// new delivery to its target with the receipt NewReceipt makes, dated by
// the suite's clock.
func (r *run) delivered(n notifier.Notification) (notifier.Receipt, Delivery) {
	r.Helper()
	var (
		rc  notifier.Receipt
		err error
	)
	got := r.after(func() { rc, err = r.deliver(r.Context(), n) })
	if err != nil {
		r.Fatalf("%s to %q: %v", n.Kind, n.Target.Address, err)
	}
	if rc.Ref == "" {
		r.Errorf("%s: the receipt has no Ref", n.Kind)
	}
	if want := notifier.NewReceipt(n, rc.Ref, nil, suiteNow); rc != want {
		r.Errorf("%s: receipt\n got  %+v\n want %+v", n.Kind, rc, want)
	}
	if len(got) != 1 {
		r.Fatalf("%s: the receiving side got %d deliveries, want 1: %+v", n.Kind, len(got), got)
	}
	return rc, got[0]
}

// refused delivers n with ctx and fails the test unless it fails as
// permanent says, with nothing delivered and the failed receipt.
func (r *run) refused(ctx context.Context, n notifier.Notification, permanent bool) error {
	r.Helper()
	var (
		rc  notifier.Receipt
		err error
	)
	got := r.after(func() { rc, err = r.deliver(ctx, n) })
	if err == nil {
		r.Errorf("%s to %q: delivered, want a failure", n.Kind, n.Target.Address)
		return nil
	}
	if errors.Is(err, notifier.ErrPermanent) != permanent {
		r.Errorf("%s to %q: permanent = %v, want %v: %v", n.Kind, n.Target.Address, !permanent, permanent, err)
	}
	if want := notifier.NewReceipt(n, "", err, suiteNow); rc != want {
		r.Errorf("%s: receipt\n got  %+v\n want %+v", n.Kind, rc, want)
	}
	if len(got) != 0 {
		r.Errorf("%s to %q failed, yet the receiving side got %+v", n.Kind, n.Target.Address, got)
	}
	return err
}

// shows fails the test unless content contains every one of want, compared
// without case.
func (r *run) shows(what, content string, want ...string) {
	r.Helper()
	low := strings.ToLower(content)
	for _, w := range want {
		if !strings.Contains(low, strings.ToLower(w)) {
			r.Errorf("%s does not show %q:\n%s", what, w, content)
		}
	}
}

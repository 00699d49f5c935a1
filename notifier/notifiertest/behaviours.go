package notifiertest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

func testName(r *run) {
	name := r.ch.Name()
	if !contracts.ValidChannelName(name) {
		r.Errorf("Name() = %q, not a channel name", name)
	}
	for _, t := range r.s.Targets {
		if t.Channel != name {
			r.Errorf("Name() = %q, but the targets are on %q", name, t.Channel)
		}
	}
}

// testRequestReachesItsTarget: a request to each of two targets is one
// delivery to that target, and the receipt says it was delivered.
func testRequestReachesItsTarget(r *run) {
	for i := range r.s.Targets {
		_, d := r.delivered(notifier.Requested(r.req(1), r.target(i)))
		if d.To != r.target(i).Address {
			r.Errorf("a request to %q went to %q", r.target(i).Address, d.To)
		}
	}
}

// testRequestShowsTheApproval: the delivery names the approval and shows
// what it is about, and a channel for people links to where to act.
func testRequestShowsTheApproval(r *run) {
	req := r.req(1)
	for i := range r.s.Targets {
		_, d := r.delivered(notifier.Requested(req, r.target(i)))
		r.shows("the request", d.Content, req.EventID, toolName, summary)
		if r.h.Links {
			r.shows("the request", d.Content, suiteURL+"/")
		}
		if readsAsReminder(d.Content) {
			r.Errorf("the first request reads as a reminder:\n%s", d.Content)
		}
	}
}

// testOutcomeLandsWhereTheRequestWasShown: with the request's receipt Ref,
// every outcome is delivered in the request's thread and says what
// happened.
func testOutcomeLandsWhereTheRequestWasShown(r *run) {
	for i, status := range terminalStatuses {
		req := r.req(10 + i)
		shown, reqD := r.delivered(notifier.Requested(req, r.target(0)))
		rec := outcome(req, status)
		_, d := r.delivered(notifier.Decided(rec, r.target(0), shown.Ref))
		if d.Thread != reqD.Thread {
			r.Errorf("%s: the outcome is in thread %q, the request in %q", status, d.Thread, reqD.Thread)
		}
		r.showsOutcome(rec, d)
	}
}

// reminderWord is "reminder" as a word of its own (a "Reminder:" heading, a
// "reminder.1" kind), not part of another ("reminders").
var reminderWord = regexp.MustCompile(`(?i)\breminder\b`)

// readsAsReminder reports whether content says it is a reminder.
func readsAsReminder(content string) bool { return reminderWord.MatchString(content) }

// showsOutcome checks that d tells rec's outcome.
func (r *run) showsOutcome(rec contracts.Record, d Delivery) {
	r.Helper()
	what := "the " + rec.Status + " outcome"
	r.shows(what, d.Content, rec.Status, rec.Request.EventID)
	if rec.Status == contracts.StatusRejected {
		r.shows(what, d.Content, rejecter, rejectComment)
	}
	if r.h.Links {
		r.shows(what, d.Content, notifier.ApprovalURL(suiteURL, rec.Request.EventID))
	}
}

// testOutcomeWithoutRefReachesItsTarget: an outcome for a target that was
// not shown the request (no Ref) is delivered there on its own.
func testOutcomeWithoutRefReachesItsTarget(r *run) {
	for i, status := range terminalStatuses {
		rec := outcome(r.req(20+i), status)
		_, d := r.delivered(notifier.Decided(rec, r.target(1), ""))
		if d.To != r.target(1).Address {
			r.Errorf("%s: an outcome to %q went to %q", status, r.target(1).Address, d.To)
		}
		r.showsOutcome(rec, d)
	}
}

// testRemindersAndEscalationsAreNew: each reminder and escalation tier is
// a delivery of its own, which the receiving side does not drop as a
// duplicate of the request or of another; a reminder says it is one, an
// escalation (the first its new approvers hear of the request) does not.
func testRemindersAndEscalationsAreNew(r *run) {
	req := r.req(30)
	shown, first := r.delivered(notifier.Requested(req, r.target(0)))
	keys := map[string]string{first.Key: notifier.KindRequested}

	rem := notifier.Reminder(req, r.target(0), 1)
	rem.Ref, rem.Record = shown.Ref, pending(req)
	_, d := r.delivered(rem)
	r.shows("the reminder", d.Content, req.EventID)
	if !readsAsReminder(d.Content) {
		r.Errorf("the reminder does not say it is one:\n%s", d.Content)
	}
	keys[d.Key] = rem.Kind

	// Later ones arrive concurrently, as from the notifier's workers.
	later := []notifier.Notification{
		notifier.Reminder(req, r.target(0), 2),
		notifier.Reminder(req, r.target(0), 3),
		{Kind: notifier.KindEscalation(1), Target: r.target(0), Request: req},
		{Kind: notifier.KindEscalation(2), Target: r.target(0), Request: req},
	}
	got := r.after(func() {
		var wg sync.WaitGroup
		for _, n := range later {
			wg.Go(func() {
				rc, err := r.ch.Notify(r.Context(), n)
				if err != nil {
					r.Errorf("%s: %v", n.Kind, err)
				} else if want := notifier.NewReceipt(n, rc.Ref, nil, suiteNow); rc != want || rc.Ref == "" {
					r.Errorf("%s: receipt\n got  %+v\n want %+v", n.Kind, rc, want)
				}
			})
		}
		wg.Wait()
	})
	if len(got) != len(later) {
		r.Fatalf("%d later notifications made %d deliveries", len(later), len(got))
	}
	reminders := 0
	for _, d := range got {
		if d.To != r.target(0).Address {
			r.Errorf("a later notification to %q went to %q", r.target(0).Address, d.To)
		}
		if readsAsReminder(d.Content) {
			reminders++
		}
		keys[d.Key] = "later"
	}
	if reminders != 2 {
		r.Errorf("%d of two reminders and two escalations read as reminders, want the two reminders", reminders)
	}
	if want := 2 + len(later); len(keys) != want {
		r.Errorf("%d notifications carry %d distinct keys, want %d: the receiving side would drop some as duplicates", want, len(keys), want)
	}
}

// testRedeliveryIsOneNotification: a notification delivered again, in turn
// and concurrently, gets the first receipt's Ref every time and is one
// notification for the receiving side.
func testRedeliveryIsOneNotification(r *run) {
	req := r.req(40)
	n := notifier.Requested(req, r.target(0))
	first, d := r.delivered(n)
	keys := r.redeliver(n, first)
	keys[d.Key] = true
	if len(keys) != 1 {
		r.Errorf("a redelivered request carries keys %v: the receiving side keeps it %d times", keys, len(keys))
	}

	u := notifier.Decided(outcome(req, contracts.StatusApproved), r.target(0), first.Ref)
	up, ud := r.delivered(u)
	ukeys := r.redeliver(u, up)
	ukeys[ud.Key] = true
	if len(ukeys) != 1 {
		r.Errorf("a redelivered outcome carries keys %v: the receiving side keeps it %d times", ukeys, len(ukeys))
	}
	if ud.Key == d.Key {
		r.Errorf("the outcome has the request's key %q: the receiving side would drop it", d.Key)
	}
}

// redeliver delivers n again once, then four times concurrently, and
// returns the keys of what the receiving side got.
func (r *run) redeliver(n notifier.Notification, first notifier.Receipt) map[string]bool {
	r.Helper()
	check := func(rc notifier.Receipt, err error) {
		if err != nil {
			r.Errorf("%s again: %v", n.Kind, err)
		} else if rc.Ref != first.Ref {
			r.Errorf("%s again: Ref %q, the first delivery's was %q", n.Kind, rc.Ref, first.Ref)
		}
	}
	got := r.after(func() {
		check(r.deliver(r.Context(), n))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { check(r.deliver(r.Context(), n)) })
		}
		wg.Wait()
	})
	keys := map[string]bool{}
	for _, d := range got {
		keys[d.Key] = true
	}
	return keys
}

// testPermanentRefusal: a refusal no retry can change fails with
// notifier.ErrPermanent (so the notifier does not retry it), and does not
// stop later deliveries.
func testPermanentRefusal(r *run) {
	req := r.req(50)
	n := notifier.Requested(req, r.target(0))
	r.s.Fail(true)
	r.refused(r.Context(), n, true)
	r.s.Fail(true)
	r.refused(r.Context(), notifier.Decided(outcome(req, contracts.StatusRejected), r.target(1), ""), true)
	r.delivered(n)
}

// testTransientRefusal: a refusal that asks to try later fails without
// notifier.ErrPermanent, and the retry of the same notification delivers
// it once.
func testTransientRefusal(r *run) {
	req := r.req(60)
	n := notifier.Requested(req, r.target(0))
	r.s.Fail(false)
	r.refused(r.Context(), n, false)
	r.delivered(n)
	u := notifier.Decided(outcome(req, contracts.StatusExpired), r.target(1), "")
	r.s.Fail(false)
	r.refused(r.Context(), u, false)
	r.delivered(u)
}

// testUnreachable: a receiving side that cannot be reached is a transient
// failure.
func testUnreachable(r *run) {
	req := r.req(70)
	r.s.Stop()
	r.refused(r.Context(), notifier.Requested(req, r.target(0)), false)
	r.refused(r.Context(), notifier.Decided(outcome(req, contracts.StatusApproved), r.target(1), ""), false)
}

// testCancelledContext: with its context cancelled, a channel delivers
// nothing and says the context ended, which is not permanent.
func testCancelledContext(r *run) {
	req := r.req(80)
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	for _, n := range []notifier.Notification{
		notifier.Requested(req, r.target(0)),
		notifier.Decided(outcome(req, contracts.StatusApproved), r.target(1), ""),
	} {
		if err := r.refused(ctx, n, false); err != nil && !errors.Is(err, context.Canceled) {
			r.Errorf("%s with a cancelled context: %v, want context.Canceled", n.Kind, err)
		}
	}
}

// testUndeliverableTarget: an address that can never be reached, or none,
// is refused permanently.
func testUndeliverableTarget(r *run) {
	req := r.req(90)
	none := notifier.Target{Channel: r.name}
	for _, t := range []notifier.Target{r.s.Unknown, none} {
		r.refused(r.Context(), notifier.Requested(req, t), true)
		r.refused(r.Context(), notifier.Decided(outcome(req, contracts.StatusRejected), t, ""), true)
	}
}

// testWrongKind: Notify delivers requests, reminders and escalations, and
// Update outcomes of terminal records; anything else is refused
// permanently, with nothing sent.
func testWrongKind(r *run) {
	req := r.req(100)
	t := r.target(0)
	decided := notifier.Decided(outcome(req, contracts.StatusApproved), t, "")
	noRecord := decided
	noRecord.Record = nil
	stillPending := notifier.Decided(*pending(req), t, "")
	check := func(what string, call func() (notifier.Receipt, error)) {
		var err error
		got := r.after(func() { _, err = call() })
		if !errors.Is(err, notifier.ErrPermanent) {
			r.Errorf("%s: %v, want a permanent error", what, err)
		}
		if len(got) != 0 {
			r.Errorf("%s: the receiving side got %+v", what, got)
		}
	}
	check("Notify of an outcome", func() (notifier.Receipt, error) { return r.ch.Notify(r.Context(), decided) })
	check("Update of a request", func() (notifier.Receipt, error) {
		return r.ch.Update(r.Context(), notifier.Requested(req, t))
	})
	check("Update without a record", func() (notifier.Receipt, error) { return r.ch.Update(r.Context(), noRecord) })
	check("Update of a pending record", func() (notifier.Receipt, error) { return r.ch.Update(r.Context(), stillPending) })
}

// testNoSecretIsShown delivers, fails in every way the suite knows, and
// looks for the channel's secrets in what was sent, returned and logged.
func testNoSecretIsShown(r *run) {
	req := r.req(110)
	var texts []string
	keep := func(rc notifier.Receipt, err error) {
		texts = append(texts, rc.Error, rc.Ref)
		if err != nil {
			texts = append(texts, err.Error())
		}
	}
	shown, _ := r.delivered(notifier.Requested(req, r.target(0)))
	rem := notifier.Reminder(req, r.target(0), 1)
	rem.Ref, rem.Record = shown.Ref, pending(req)
	keep(r.deliver(r.Context(), rem))
	keep(r.deliver(r.Context(), notifier.Decided(outcome(req, contracts.StatusRejected), r.target(0), shown.Ref)))
	r.s.Fail(true)
	keep(r.deliver(r.Context(), notifier.Requested(req, r.target(1))))
	r.s.Fail(false)
	keep(r.deliver(r.Context(), notifier.Requested(req, r.target(1))))
	keep(r.deliver(r.Context(), notifier.Requested(req, r.s.Unknown)))
	r.s.Stop()
	keep(r.deliver(r.Context(), notifier.Reminder(req, r.target(1), 2)))

	for _, d := range r.received() {
		texts = append(texts, d.To, d.Key, d.Thread, d.Content)
	}
	texts = append(texts, r.logs.String())
	for _, secret := range r.s.Secrets {
		for _, text := range texts {
			if strings.Contains(text, secret) {
				r.Errorf("a secret shows in:\n%s", text)
			}
		}
	}
}

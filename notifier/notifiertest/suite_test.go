package notifiertest

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// brokenEnv names, in a child process of TestSuiteCatchesBrokenChannels,
// the quirk TestReference gives the reference channel.
const brokenEnv = "NOTIFIERTEST_QUIRK"

// TestReference runs the suite against the reference channel, which
// passes it. In a child process started by TestSuiteCatchesBrokenChannels
// the channel has the quirk named by $NOTIFIERTEST_QUIRK, and fails it.
func TestReference(t *testing.T) {
	TestChannel(t, Harness{New: refSetup(quirk(os.Getenv(brokenEnv))), Links: true})
}

// caught says which behaviours of the suite fail a channel with each quirk.
var caught = map[quirk][]string{
	wrongName:         {"Name"},
	deliversElsewhere: {"RequestReachesItsTarget", "OutcomeWithoutRefReachesItsTarget"},
	badReceipt:        {"RequestReachesItsTarget"},
	bareRequest:       {"RequestShowsTheApproval"},
	noLinks:           {"RequestShowsTheApproval", "OutcomeLandsWhereTheRequestWasShown"},
	remindsAlways:     {"RequestShowsTheApproval", "RemindersAndEscalationsAreNewNotifications"},
	silentReminder:    {"RemindersAndEscalationsAreNewNotifications"},
	ignoresRef:        {"OutcomeLandsWhereTheRequestWasShown"},
	vagueOutcome:      {"OutcomeLandsWhereTheRequestWasShown", "OutcomeWithoutRefReachesItsTarget"},
	needsRef:          {"OutcomeWithoutRefReachesItsTarget"},
	keyByEvent:        {"RemindersAndEscalationsAreNewNotifications", "RedeliveryIsOneNotification"},
	randomKey:         {"RedeliveryIsOneNotification"},
	sendsTwice:        {"RequestReachesItsTarget", "RedeliveryIsOneNotification"},
	allTransient:      {"PermanentRefusalIsPermanent", "UndeliverableTargetIsPermanent", "WrongKindIsRefused"},
	allPermanent:      {"TransientRefusalIsRetried", "UnreachableIsTransient", "CancelledContextDeliversNothing"},
	stuckAfterRefusal: {"PermanentRefusalIsPermanent"},
	failureIsFinal:    {"TransientRefusalIsRetried"},
	ignoresContext:    {"CancelledContextDeliversNothing"},
	hidesCancellation: {"CancelledContextDeliversNothing"},
	acceptsAnyAddress: {"UndeliverableTargetIsPermanent"},
	noKindCheck:       {"WrongKindIsRefused"},
	leaksSecret:       {"NoSecretIsShown"},
	logsSecret:        {"NoSecretIsShown"},
}

// TestEveryBehaviourCatchesAQuirk: no behaviour of the suite is without a
// broken channel it fails.
func TestEveryBehaviourCatchesAQuirk(t *testing.T) {
	named := map[string]bool{}
	for _, names := range caught {
		for _, n := range names {
			named[n] = true
		}
	}
	known := map[string]bool{}
	for _, b := range behaviours {
		known[b.name] = true
		if !named[b.name] {
			t.Errorf("behaviour %s fails no broken channel", b.name)
		}
	}
	for n := range named {
		if !known[n] {
			t.Errorf("caught names %s, which is not a behaviour", n)
		}
	}
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: TestReference/(\S+)`)

// TestSuiteCatchesBrokenChannels runs the suite in a child process (the
// suite needs a real *testing.T) against the reference channel with each
// quirk, and reads which behaviours failed.
func TestSuiteCatchesBrokenChannels(t *testing.T) {
	for q, want := range caught {
		t.Run(string(q), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestReference$", "-test.count=1", "-test.v", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+string(q))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a channel with quirk %s (%v):\n%s", q, err, out)
			}
			if strings.Contains(string(out), "panic:") {
				t.Fatalf("the suite panicked:\n%s", out)
			}
			failed := map[string]bool{}
			for _, m := range failLine.FindAllStringSubmatch(string(out), -1) {
				failed[m[1]] = true
			}
			for _, b := range want {
				if !failed[b] {
					t.Errorf("behaviour %s passed a channel with quirk %s; failed: %v", b, q, failed)
				}
			}
		})
	}
}

package events_test

import (
	"testing"

	"github.com/countersign/countersign/events"
)

func TestOnlyInboxesAreAnswerable(t *testing.T) {
	for reply, want := range map[string]bool{
		"_INBOX.abc":                  true,
		"_INBOX.abc.1":                true,
		"_INBOX_api.abc":              true,
		"_INBOX_resolver.abc.def":     true,
		"":                            false,
		"_INBOX":                      false,
		"_INBOX.":                     false,
		"_INBOX_api":                  false,
		"_INBOX_api.":                 false,
		"_INBOX_.abc":                 false,
		"_INBOXES.abc":                false,
		"_INBOX_*.abc":                false,
		"$JS.API.STREAM.PURGE.KV_x":   false,
		"$JS.ACK.HITL_REQUESTS.a.1.1": false,
		"$KV.hitl_approvals.x":        false,
		"hitl.approval.decided.x":     false,
		"inbox._INBOX.x":              false,
	} {
		if got := events.Answerable(reply); got != want {
			t.Errorf("Answerable(%q) = %v, want %v", reply, got, want)
		}
	}
}

package contracts_test

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

func TestParseRoute(t *testing.T) {
	ok := []struct {
		in         string
		ch, kind   string
		value, out string
	}{
		{"inbox", "inbox", contracts.RouteNone, "", "inbox"},
		{"slack", "slack", contracts.RouteApprovers, "", "slack"},
		{"slack:#payments-approvals", "slack", contracts.RouteConversation, "#payments-approvals", "slack:#payments-approvals"},
		{"slack:C024BE91L", "slack", contracts.RouteConversation, "C024BE91L", "slack:C024BE91L"},
		{"slack:@alice", "slack", contracts.RouteUser, "alice", "slack:@alice"},
		{"slack:@U012AB3CD", "slack", contracts.RouteUser, "U012AB3CD", "slack:@U012AB3CD"},
		{"slack:group:oncall", "slack", contracts.RouteGroup, "oncall", "slack:group:oncall"},
		{"email", "email", contracts.RouteApprovers, "", "email"},
		{"email:group:finance", "email", contracts.RouteGroup, "finance", "email:group:finance"},
		{"email:alice", "email", contracts.RouteUser, "alice", "email:alice"},
		{"email:ops@example.com", "email", contracts.RouteAddress, "ops@example.com", "email:ops@example.com"},
		{"webhook", "webhook", contracts.RouteAll, "", "webhook"},
		{"webhook:audit-log", "webhook", contracts.RouteEndpoint, "audit-log", "webhook:audit-log"},
	}
	for _, c := range ok {
		r, err := contracts.ParseRoute(c.in)
		if err != nil {
			t.Errorf("ParseRoute(%q): %v", c.in, err)
			continue
		}
		if r.Channel != c.ch || r.Kind != c.kind || r.Value != c.value {
			t.Errorf("ParseRoute(%q) = %+v, want %s/%s/%q", c.in, r, c.ch, c.kind, c.value)
		}
		if r.String() != c.out {
			t.Errorf("ParseRoute(%q).String() = %q, want %q", c.in, r.String(), c.out)
		}
	}
	bad := []struct{ in, want string }{
		{"", "unknown channel"},
		{"sms:+15551234", "unknown channel"},
		{"slack:", "nothing after"},
		{"slack:#Payments", "lower case"},
		{"slack:#a b", "lower case"},
		{"slack:payments", "use slack"},
		{"slack:@", "user"},
		{"email:not an address@x", "not an email address"},
		{"email:a@b..c", "not an email address"},
		{"email:group:", "group name"},
		{"webhook:Audit", "endpoint names"},
		{"webhook:https://example.com/hook", "endpoint names"},
		{"inbox:alice", "takes no target"},
	}
	for _, c := range bad {
		_, err := contracts.ParseRoute(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRoute(%q) error = %v, want one containing %q", c.in, err, c.want)
		}
	}
}

func TestIsSlackUserID(t *testing.T) {
	for s, want := range map[string]bool{"U012AB3CD": true, "W012AB3CD": true, "C024BE91L": false, "alice": false, "U01": false} {
		if got := contracts.IsSlackUserID(s); got != want {
			t.Errorf("IsSlackUserID(%q) = %v, want %v", s, got, want)
		}
	}
}

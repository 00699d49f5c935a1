package policy_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

func TestNotifyStagesAreReadInOrderBesideChannels(t *testing.T) {
	p, err := policy.Parse([]byte(`
version: v1
rules:
  - name: payments
    tools: [pay]
    action: require_approval
    channels: [inbox]
    notify:
      - channel: push
      - channel: slack
        after: 5m
      - channel: email:group:finance
        after: 1h30m
`))
	if err != nil {
		t.Fatal(err)
	}
	d := p.Evaluate(policy.Input{Tool: "pay"})
	want := []contracts.NotifyStage{{Channel: "push"}, {Channel: "slack", After: "5m"}, {Channel: "email:group:finance", After: "1h30m"}}
	if !reflect.DeepEqual(d.Notify, want) || !reflect.DeepEqual(d.Channels, []string{"inbox"}) {
		t.Fatalf("notify %+v, channels %v", d.Notify, d.Channels)
	}
}

func TestNotifyProblems(t *testing.T) {
	for name, c := range map[string]struct{ notify, want string }{
		"unknown route":  {"[{channel: sms}]", `unknown channel "sms"`},
		"out of order":   {"[{channel: slack, after: 10m}, {channel: email, after: 5m}]", "is before the stage before it"},
		"twice":          {"[{channel: push}, {channel: push, after: 5m}]", `channel "push" is listed twice`},
		"no channel":     {"[{after: 5m}]", "channel is required"},
		"unknown key":    {"[{channel: push, when: later}]", "when"},
		"not a list":     {"push", "must be a list of stages"},
		"negative":       {"[{channel: push, after: -5m}]", "must be positive"},
		"not a duration": {"[{channel: push, after: soon}]", "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := policy.Parse([]byte("version: v1\nrules:\n  - name: r\n    tools: [pay]\n    action: require_approval\n    notify: " + c.notify + "\n"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

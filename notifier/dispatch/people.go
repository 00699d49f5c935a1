package dispatch

import (
	"fmt"
	"strings"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Person is what routing needs to know about a directory user.
type Person struct {
	ID          string
	Email       string
	SlackUserID string
}

// People looks up the approver directory. Implementations must be safe for
// concurrent use; the directory may change between calls.
type People interface {
	Person(id string) (Person, bool)
	BySlackID(slackUserID string) (Person, bool)
	ByEmail(addr string) (Person, bool)
	// Members returns the user ids of a group, and whether it exists.
	Members(group string) ([]string, bool)
}

// noPeople is an empty directory.
type noPeople struct{}

func (noPeople) Person(string) (Person, bool)    { return Person{}, false }
func (noPeople) BySlackID(string) (Person, bool) { return Person{}, false }
func (noPeople) ByEmail(string) (Person, bool)   { return Person{}, false }
func (noPeople) Members(string) ([]string, bool) { return nil, false }

// Problem is a route that reaches nobody (an unknown group, a user without
// an email address, an unconfigured channel). It is reported as a failed
// receipt, once, so that the timeline shows why someone was not told.
type Problem struct {
	Channel string
	Route   string
	Reason  string
}

// Targets resolves the channels of req (one entry per route) into targets,
// without duplicates, in route order. endpoints are the configured webhook
// endpoint names, for the bare "webhook" route.
func Targets(req *contracts.ApprovalRequested, routes []string, people People, endpoints []string) ([]notifier.Target, []Problem) {
	return TargetsFor(req.Quorum.Approvers, routes, people, endpoints)
}

// TargetsFor is Targets for the approvers given, which the bare "slack" and
// "email" routes reach (an escalation tier's approvers, say).
func TargetsFor(approvers []string, routes []string, people People, endpoints []string) ([]notifier.Target, []Problem) {
	if people == nil {
		people = noPeople{}
	}
	var (
		out      []notifier.Target
		problems []Problem
		seen     = map[string]bool{}
	)
	add := func(t notifier.Target) {
		k := t.Channel + "\x00" + t.Address
		if !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	for _, raw := range routes {
		r, err := contracts.ParseRoute(raw)
		if err != nil {
			problems = append(problems, Problem{Channel: channelOf(raw), Route: raw, Reason: err.Error()})
			continue
		}
		miss := func(format string, args ...any) {
			problems = append(problems, Problem{Channel: r.Channel, Route: raw, Reason: fmt.Sprintf(format, args...)})
		}
		// person adds the target of one directory user on r's channel.
		person := func(id string) {
			p, ok := people.Person(id)
			if !ok {
				miss("%s is not in the directory", id)
				return
			}
			switch r.Channel {
			case contracts.ChannelSlack:
				if p.SlackUserID == "" {
					miss("%s has no Slack user id in the directory", id)
					return
				}
				add(notifier.Target{Channel: r.Channel, Address: p.SlackUserID, Approver: p.ID})
			case contracts.ChannelEmail:
				if p.Email == "" {
					miss("%s has no email address in the directory", id)
					return
				}
				add(notifier.Target{Channel: r.Channel, Address: p.Email, Approver: p.ID})
			}
		}
		switch r.Kind {
		case contracts.RouteNone:
		case contracts.RouteApprovers:
			if len(approvers) == 0 {
				miss("the request names no approvers (anyone may approve); route to a channel, group or address instead")
			}
			for _, id := range approvers {
				person(id)
			}
		case contracts.RouteGroup:
			members, ok := people.Members(r.Value)
			if !ok {
				miss("no group %q in the directory", r.Value)
			}
			for _, id := range members {
				person(id)
			}
		case contracts.RouteUser:
			if r.Channel == contracts.ChannelSlack && contracts.IsSlackUserID(r.Value) {
				t := notifier.Target{Channel: r.Channel, Address: r.Value}
				if p, ok := people.BySlackID(r.Value); ok {
					t.Approver = p.ID
				}
				add(t)
				continue
			}
			person(r.Value)
		case contracts.RouteConversation:
			add(notifier.Target{Channel: r.Channel, Address: r.Value})
		case contracts.RouteAddress:
			t := notifier.Target{Channel: r.Channel, Address: r.Value}
			if p, ok := people.ByEmail(r.Value); ok {
				t.Approver = p.ID
			}
			add(t)
		case contracts.RouteEndpoint:
			add(notifier.Target{Channel: r.Channel, Address: r.Value})
		case contracts.RouteAll:
			if len(endpoints) == 0 {
				miss("no webhook endpoints are configured")
			}
			for _, name := range endpoints {
				add(notifier.Target{Channel: r.Channel, Address: name})
			}
		}
	}
	return out, problems
}

func channelOf(route string) string {
	ch, _, _ := strings.Cut(route, ":")
	if contracts.ValidChannelName(ch) {
		return ch
	}
	return "unknown"
}

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
	rt := &router{approvers: approvers, people: people, endpoints: endpoints, seen: map[string]bool{}}
	for _, raw := range routes {
		rt.route(raw)
	}
	return rt.out, rt.problems
}

// router resolves the routes of one call of TargetsFor: it collects the
// targets, each once, in route order, and the problems.
type router struct {
	approvers []string
	people    People
	endpoints []string

	out      []notifier.Target
	problems []Problem
	seen     map[string]bool // channel and address of every target in out
}

// add adds t unless a target with its channel and address is there.
func (rt *router) add(t notifier.Target) {
	k := t.Channel + "\x00" + t.Address
	if !rt.seen[k] {
		rt.seen[k] = true
		rt.out = append(rt.out, t)
	}
}

// miss records that route raw (parsed as r) misses someone, and why.
func (rt *router) miss(r contracts.Route, raw, format string, args ...any) {
	rt.problems = append(rt.problems, Problem{Channel: r.Channel, Route: raw, Reason: fmt.Sprintf(format, args...)})
}

// route adds the targets of one route.
func (rt *router) route(raw string) {
	r, err := contracts.ParseRoute(raw)
	if err != nil {
		rt.problems = append(rt.problems, Problem{Channel: channelOf(raw), Route: raw, Reason: err.Error()})
		return
	}
	switch r.Kind {
	case contracts.RouteNone:
	case contracts.RouteApprovers:
		if len(rt.approvers) == 0 {
			rt.miss(r, raw, "the request names no approvers (anyone may approve); route to a channel, group or address instead")
		}
		rt.persons(r, raw, rt.approvers)
	case contracts.RouteGroup:
		members, ok := rt.people.Members(r.Value)
		if !ok {
			rt.miss(r, raw, "no group %q in the directory", r.Value)
		}
		rt.persons(r, raw, members)
	case contracts.RouteUser:
		rt.user(r, raw)
	case contracts.RouteConversation, contracts.RouteEndpoint:
		rt.add(notifier.Target{Channel: r.Channel, Address: r.Value})
	case contracts.RouteAddress:
		t := notifier.Target{Channel: r.Channel, Address: r.Value}
		if p, ok := rt.people.ByEmail(r.Value); ok {
			t.Approver = p.ID
		}
		rt.add(t)
	case contracts.RouteAll:
		if len(rt.endpoints) == 0 {
			rt.miss(r, raw, "no webhook endpoints are configured")
		}
		for _, name := range rt.endpoints {
			rt.add(notifier.Target{Channel: r.Channel, Address: name})
		}
	}
}

// user adds the target of a route to one user: a Slack user id as it is
// (the approver it belongs to, if any), else a directory user.
func (rt *router) user(r contracts.Route, raw string) {
	if r.Channel == contracts.ChannelSlack && contracts.IsSlackUserID(r.Value) {
		t := notifier.Target{Channel: r.Channel, Address: r.Value}
		if p, ok := rt.people.BySlackID(r.Value); ok {
			t.Approver = p.ID
		}
		rt.add(t)
		return
	}
	rt.person(r, raw, r.Value)
}

func (rt *router) persons(r contracts.Route, raw string, ids []string) {
	for _, id := range ids {
		rt.person(r, raw, id)
	}
}

// person adds the target of directory user id on r's channel.
func (rt *router) person(r contracts.Route, raw, id string) {
	p, ok := rt.people.Person(id)
	if !ok {
		rt.miss(r, raw, "%s is not in the directory", id)
		return
	}
	switch r.Channel {
	case contracts.ChannelSlack:
		if p.SlackUserID == "" {
			rt.miss(r, raw, "%s has no Slack user id in the directory", id)
			return
		}
		rt.add(notifier.Target{Channel: r.Channel, Address: p.SlackUserID, Approver: p.ID})
	case contracts.ChannelEmail:
		if p.Email == "" {
			rt.miss(r, raw, "%s has no email address in the directory", id)
			return
		}
		rt.add(notifier.Target{Channel: r.Channel, Address: p.Email, Approver: p.ID})
	}
}

func channelOf(route string) string {
	ch, _, _ := strings.Cut(route, ":")
	if contracts.ValidChannelName(ch) {
		return ch
	}
	return "unknown"
}

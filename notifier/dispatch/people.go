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
	// Tenants and Roles are the address book's, which the read rule uses
	// only where no live directory is published (see Audience).
	Tenants []string
	Roles   []string
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
// an email address, an unconfigured channel), or someone it may not tell
// (Unreadable: the read rule refused them). It is reported as a failed
// receipt, once, so that the timeline shows why someone was not told.
type Problem struct {
	Channel string
	Route   string
	Reason  string
	// Unreadable: the read rule kept the request from the person (or the
	// destination) the route reaches.
	Unreadable bool
}

// Audience decides who of those a route reaches may be told of a request:
// the read rule. Routing without one tells everyone it reaches.
type Audience interface {
	// Person reports whether p may be told, and why not.
	Person(p Person) (ok bool, why string)
	// Shared reports whether a destination that is nobody's in particular
	// (a Slack conversation, an address of nobody in the directory, a
	// webhook endpoint) takes the request, and why not.
	Shared(channel, address string) (ok bool, why string)
}

// Routing is what one request's routes are resolved with.
type Routing struct {
	// Approvers are whom the bare "slack" and "email" routes reach.
	Approvers []string
	Routes    []string
	People    People
	// Endpoints are the configured webhook endpoint names, for the bare
	// "webhook" route.
	Endpoints []string
	// Audience, when set, keeps out everyone the request may not be shown to.
	Audience Audience
}

// Resolve turns the routes into targets, without duplicates, in route
// order, and the problems.
func (r Routing) Resolve() ([]notifier.Target, []Problem) {
	people := r.People
	if people == nil {
		people = noPeople{}
	}
	rt := &router{approvers: r.Approvers, people: people, endpoints: r.Endpoints, audience: r.Audience, seen: map[string]bool{}}
	for _, raw := range r.Routes {
		rt.route(raw)
	}
	return rt.out, rt.problems
}

// Targets resolves the channels of req (one entry per route) into targets,
// without duplicates, in route order, telling everyone they reach (no read
// rule; the Dispatcher applies one). endpoints are the configured webhook
// endpoint names, for the bare "webhook" route.
func Targets(req *contracts.ApprovalRequested, routes []string, people People, endpoints []string) ([]notifier.Target, []Problem) {
	return TargetsFor(req.Quorum.Approvers, routes, people, endpoints)
}

// TargetsFor is Targets for the approvers given, which the bare "slack" and
// "email" routes reach (an escalation tier's approvers, say).
func TargetsFor(approvers []string, routes []string, people People, endpoints []string) ([]notifier.Target, []Problem) {
	return Routing{Approvers: approvers, Routes: routes, People: people, Endpoints: endpoints}.Resolve()
}

// router resolves the routes of one Routing: it collects the targets, each
// once, in route order, and the problems.
type router struct {
	approvers []string
	people    People
	endpoints []string
	audience  Audience

	out      []notifier.Target
	problems []Problem
	seen     map[string]bool // channel and address of every target in out
}

// shared adds t, a destination of nobody in particular, when the audience
// lets it take the request, and reports whether it did.
func (rt *router) shared(r contracts.Route, raw string, t notifier.Target, quiet bool) bool {
	if rt.audience != nil {
		if ok, why := rt.audience.Shared(t.Channel, t.Address); !ok {
			if !quiet {
				rt.refuse(r, raw, why)
			}
			return false
		}
	}
	rt.add(t)
	return true
}

// personal adds t, a target of person p, when the audience lets p be told.
func (rt *router) personal(r contracts.Route, raw string, p Person, t notifier.Target) {
	if rt.audience != nil {
		if ok, why := rt.audience.Person(p); !ok {
			rt.refuse(r, raw, why)
			return
		}
	}
	rt.add(t)
}

// refuse records that the read rule keeps route raw from someone.
func (rt *router) refuse(r contracts.Route, raw, why string) {
	rt.problems = append(rt.problems, Problem{Channel: r.Channel, Route: raw, Reason: why, Unreadable: true})
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
		rt.shared(r, raw, notifier.Target{Channel: r.Channel, Address: r.Value}, false)
	case contracts.RouteAddress:
		t := notifier.Target{Channel: r.Channel, Address: r.Value}
		if p, ok := rt.people.ByEmail(r.Value); ok {
			t.Approver = p.ID
			rt.personal(r, raw, p, t)
			return
		}
		rt.shared(r, raw, t, false)
	case contracts.RouteAll:
		if len(rt.endpoints) == 0 {
			rt.miss(r, raw, "no webhook endpoints are configured")
		}
		took := 0
		for _, name := range rt.endpoints {
			// The bare route reaches the endpoints that take the request.
			if rt.shared(r, raw, notifier.Target{Channel: r.Channel, Address: name}, true) {
				took++
			}
		}
		if took == 0 && len(rt.endpoints) > 0 {
			rt.refuse(r, raw, "no webhook endpoint takes requests of this tenant")
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
			rt.personal(r, raw, p, t)
			return
		}
		rt.shared(r, raw, t, false)
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
		rt.personal(r, raw, p, notifier.Target{Channel: r.Channel, Address: p.SlackUserID, Approver: p.ID})
	case contracts.ChannelEmail:
		if p.Email == "" {
			rt.miss(r, raw, "%s has no email address in the directory", id)
			return
		}
		rt.personal(r, raw, p, notifier.Target{Channel: r.Channel, Address: p.Email, Approver: p.ID})
	case contracts.ChannelPush:
		// The person's subscribed devices, which the channel looks up.
		rt.personal(r, raw, p, notifier.Target{Channel: r.Channel, Address: p.ID, Approver: p.ID})
	}
}

func channelOf(route string) string {
	ch, _, _ := strings.Cut(route, ":")
	if contracts.ValidChannelName(ch) {
		return ch
	}
	return "unknown"
}

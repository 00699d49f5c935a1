package contracts

import (
	"fmt"
	"strings"
)

// Channel names of the built-in channels. A channel's name is one NATS
// subject token (see ValidChannelName); it appears in request snapshots
// (channels[]) and in receipt subjects.
const (
	ChannelSlack   = "slack"
	ChannelEmail   = "email"
	ChannelWebhook = "webhook"
	ChannelInbox   = "inbox"
	// ChannelPush is Web Push to the phones and browsers a person
	// subscribed (see notifier/push).
	ChannelPush = "push"
)

// Route kinds: what a channel entry of a policy rule names.
const (
	// RouteApprovers reaches every approver of the request on the channel
	// ("slack", "email"): a Slack direct message, an email to the address
	// in the directory.
	RouteApprovers = "approvers"
	// RouteConversation is a Slack conversation: "slack:#payments" or an id
	// such as "slack:C024BE91L".
	RouteConversation = "conversation"
	// RouteUser is one person: "slack:@alice" (a directory user or a Slack
	// user id) or "email:alice" (a directory user).
	RouteUser = "user"
	// RouteGroup is every member of a directory group: "email:group:finance".
	RouteGroup = "group"
	// RouteAddress is a literal email address: "email:ops@example.com".
	RouteAddress = "address"
	// RouteEndpoint is a configured webhook endpoint: "webhook:audit".
	RouteEndpoint = "endpoint"
	// RouteAll is every configured endpoint of a channel: "webhook".
	RouteAll = "all"
	// RouteNone needs no delivery: "inbox" (the web inbox lists every
	// pending request by itself).
	RouteNone = "none"
)

// Route is one parsed entry of a rule's channels list.
type Route struct {
	// Channel is the channel's name: slack, email, webhook or inbox.
	Channel string
	// Kind is one of the Route* kinds.
	Kind string
	// Value is the conversation, user, group, address or endpoint named,
	// without its marker ("#", "@", "group:").
	Value string
}

// String is the route as written in a policy.
func (r Route) String() string {
	switch r.Kind {
	case RouteApprovers, RouteAll, RouteNone:
		return r.Channel
	case RouteConversation:
		if strings.HasPrefix(r.Value, "#") || isSlackID(r.Value) {
			return r.Channel + ":" + r.Value
		}
		return r.Channel + ":#" + r.Value
	case RouteUser:
		if r.Channel == ChannelSlack {
			return r.Channel + ":@" + r.Value
		}
		return r.Channel + ":" + r.Value
	case RouteGroup:
		return r.Channel + ":group:" + r.Value
	default:
		return r.Channel + ":" + r.Value
	}
}

// ParseRoute parses one entry of a policy rule's channels list:
//
//	inbox                    the web inbox (nothing to deliver)
//	slack                    a direct message to every approver
//	slack:#payments          a message in a Slack channel, by name
//	slack:C024BE91L          a message in a Slack conversation, by id
//	slack:@alice             a direct message to a directory user (or a Slack user id: slack:@U012AB3CD)
//	slack:group:oncall       a direct message to every member of a group
//	email                    an email to every approver
//	email:group:finance      an email to every member of a group
//	email:alice              an email to a directory user
//	email:ops@example.com    an email to an address
//	webhook                  every configured webhook endpoint
//	webhook:audit            the configured endpoint named audit
//	push                     a Web Push notification to every approver's subscribed devices
//	push:group:oncall        to the devices of every member of a group
//	push:alice               to the devices of a directory user
//
// Channel secrets never appear here; they come from the configuration.
func ParseRoute(s string) (Route, error) {
	ch, rest, has := strings.Cut(s, ":")
	bad := func(format string, args ...any) (Route, error) {
		return Route{}, fmt.Errorf("channel %q: %s", s, fmt.Sprintf(format, args...))
	}
	if has && rest == "" {
		return bad("nothing after %q", ch+":")
	}
	group, isGroup := strings.CutPrefix(rest, "group:")
	if isGroup && !validName(group) {
		return bad("group name %q: use letters, digits, '.', '_' and '-'", group)
	}
	switch ch {
	case ChannelInbox:
		if has {
			return bad("the inbox takes no target")
		}
		return Route{Channel: ch, Kind: RouteNone}, nil
	case ChannelSlack:
		switch {
		case !has:
			return Route{Channel: ch, Kind: RouteApprovers}, nil
		case isGroup:
			return Route{Channel: ch, Kind: RouteGroup, Value: group}, nil
		case strings.HasPrefix(rest, "#"):
			name := rest[1:]
			if name == "" || len(name) > 80 || strings.ContainsAny(name, " \t#@,") || strings.ToLower(name) != name {
				return bad("Slack channel names are lower case, without spaces, at most 80 characters")
			}
			return Route{Channel: ch, Kind: RouteConversation, Value: "#" + name}, nil
		case strings.HasPrefix(rest, "@"):
			name := rest[1:]
			if !validName(name) {
				return bad("user %q: use a directory user id or a Slack user id", name)
			}
			return Route{Channel: ch, Kind: RouteUser, Value: name}, nil
		case isSlackID(rest):
			return Route{Channel: ch, Kind: RouteConversation, Value: rest}, nil
		default:
			return bad("use slack, slack:#channel, slack:C… (a conversation id), slack:@user or slack:group:NAME")
		}
	case ChannelEmail:
		switch {
		case !has:
			return Route{Channel: ch, Kind: RouteApprovers}, nil
		case isGroup:
			return Route{Channel: ch, Kind: RouteGroup, Value: group}, nil
		case strings.Contains(rest, "@"):
			if !validAddress(rest) {
				return bad("not an email address")
			}
			return Route{Channel: ch, Kind: RouteAddress, Value: rest}, nil
		case validName(rest):
			return Route{Channel: ch, Kind: RouteUser, Value: rest}, nil
		default:
			return bad("use email, email:group:NAME, email:USER or email:name@example.com")
		}
	case ChannelWebhook:
		if !has {
			return Route{Channel: ch, Kind: RouteAll}, nil
		}
		if !ValidChannelName(rest) {
			return bad("endpoint names are 1 to 32 characters of a-z, 0-9, '_' and '-'")
		}
		return Route{Channel: ch, Kind: RouteEndpoint, Value: rest}, nil
	case ChannelPush:
		switch {
		case !has:
			return Route{Channel: ch, Kind: RouteApprovers}, nil
		case isGroup:
			return Route{Channel: ch, Kind: RouteGroup, Value: group}, nil
		case validName(rest):
			return Route{Channel: ch, Kind: RouteUser, Value: rest}, nil
		default:
			return bad("use push, push:group:NAME or push:USER")
		}
	default:
		return bad("unknown channel %q (slack, email, push, webhook, inbox)", ch)
	}
}

// isSlackID reports whether s looks like a Slack conversation or user id:
// an upper-case letter C, G, D or U followed by upper-case letters and digits.
func isSlackID(s string) bool {
	if len(s) < 9 || len(s) > 24 || !strings.ContainsRune("CGDUW", rune(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// IsSlackUserID reports whether s looks like a Slack user id (U… or W…).
func IsSlackUserID(s string) bool { return isSlackID(s) && (s[0] == 'U' || s[0] == 'W') }

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validAddress accepts a plain addr-spec: local@domain with a dot-separated
// domain and no spaces or angle brackets.
func validAddress(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	if !ok || local == "" || domain == "" || strings.Contains(domain, "@") || len(s) > 254 {
		return false
	}
	if strings.ContainsAny(s, " \t<>()[],;:\"\\") {
		return false
	}
	for _, label := range strings.Split(domain, ".") {
		if label == "" {
			return false
		}
	}
	return true
}

// ValidChannelName reports whether name can be a channel's name: 1 to 32
// characters of [a-z0-9_-], so that it is one subject token.
func ValidChannelName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

package events

import "strings"

// Answerable reports whether reply, the reply subject of a request a
// service received, is an inbox: the client library's default (_INBOX.) or
// a role's (_INBOX_<role>., see embedded.InboxPrefix). A service answers
// requests only there. The requester chooses the reply subject, and an
// answer is published with the answering service's own rights: answered
// on any other subject, a request would let its sender publish as the
// service (a JetStream API call that purges a stream, a record's key, an
// announcement). A message the server delivers from a stream carries a
// $JS.ACK reply and is never a request either.
func Answerable(reply string) bool {
	rest, ok := strings.CutPrefix(reply, "_INBOX")
	if !ok {
		return false
	}
	if inbox, ok := strings.CutPrefix(rest, "."); ok {
		return inbox != ""
	}
	role, inbox, ok := strings.Cut(strings.TrimPrefix(rest, "_"), ".")
	return ok && strings.HasPrefix(rest, "_") && role != "" && inbox != "" && !strings.ContainsAny(role, "*>") && !strings.ContainsAny(inbox, "*>")
}

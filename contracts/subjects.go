package contracts

import "strings"

// Stream, bucket and subject names. These are the contract between every role
// and every client; they never change within a major version.
const (
	StreamRequests    = "HITL_REQUESTS"
	StreamResolutions = "HITL_RESOLUTIONS"
	StreamEvents      = "HITL_EVENTS"
	StreamTimers      = "HITL_TIMERS"
	StreamDeadLetter  = "HITL_DEADLETTER"

	BucketApprovals = "hitl_approvals"
	BucketPolicy    = "hitl_policy"
	// BucketSessions holds the web inbox's sign-in sessions, shared by every
	// API replica; written and read by the API role only.
	BucketSessions = "hitl_sessions"

	SubjectToolRequestedPrefix  = "hitl.tool.approval.requested."
	SubjectInputRequestedPrefix = "hitl.human.input.requested."
	SubjectResolvedPrefix       = "hitl.approval.resolved."
	SubjectCommandPrefix        = "hitl.approval.command."
	SubjectDecidedPrefix        = "hitl.approval.decided."
	SubjectChangedPrefix        = "hitl.approval.changed."
	// SubjectClaimPrefix is where a runner asks the arbiter, by NATS
	// request, to apply a claim command (the Command message) at once. No
	// stream stores it: the claim is durable in the record it writes and
	// announced on the changed subject, as for a claim published on
	// CommandSubject, which stays the way for every other client. The
	// reply is empty when the claim was handled (accepted or refused, as
	// the record and the changed event tell); otherwise it carries the
	// headers HeaderClaimError (a stable code) and HeaderClaimErrorMessage,
	// and the runner publishes the same command on CommandSubject instead.
	SubjectClaimPrefix = "hitl.approval.claim."
	// SubjectVotePrefix is where a resolver asks the arbiter, by NATS
	// request, to apply a vote (the Vote message) at once, as claims are
	// asked on SubjectClaimPrefix: no stream stores the request, the vote
	// is durable in the record it writes (a decision then waits for one
	// synced write, not two) and announced as any vote is. The reply is
	// empty when the vote was handled (counted or refused, as the record
	// tells); otherwise it carries HeaderVoteError (a stable code) and
	// HeaderVoteErrorMessage, and the resolver publishes the same vote on
	// ResolvedSubject instead, which stays the way for every other client.
	SubjectVotePrefix = "hitl.approval.vote."
	// SubjectRecordPrefix is where the server republishes every write of
	// an approval record right after storing it (JetStream RePublish on
	// the hitl_approvals bucket): hitl.approval.record.<event_id>, the
	// record as stored, its revision in the Nats-Sequence header. No
	// client may publish there; a waiter that follows it is woken by the
	// record write itself.
	SubjectRecordPrefix = "hitl.approval.record."
	// SubjectCreatedPrefix is where the arbiter tells, as a plain NATS
	// message that no stream stores, that it created an approval's record
	// (waiters of that approval read it then).
	SubjectCreatedPrefix = "hitl.approval.created."
	SubjectNotifyPrefix  = "hitl.notify."
	// SubjectReadPrefix is where the API records that someone read an
	// approval with sensitive arguments, or exported its audit trail.
	SubjectReadPrefix          = "hitl.approval.read."
	SubjectDeadLetterPrefix    = "hitl.deadletter."
	SubjectTimerPrefix         = "hitl.timer."
	SubjectTimerSchedulePrefix = "hitl.timer.schedule."
	SubjectTimerFirePrefix     = "hitl.timer.fire."

	// TimerExpire is the timer kind that expires a pending approval.
	TimerExpire = "expire"
	// TimerRemindPrefix and TimerEscalatePrefix start the timer kinds of
	// the n-th reminder and escalation tier: "remind-1", "escalate-2".
	TimerRemindPrefix   = "remind-"
	TimerEscalatePrefix = "escalate-"
	// TimerNotifyPrefix starts the timer kind of the n-th stage of a
	// staggered notification (ApprovalRequested.Notify): "notify-2".
	TimerNotifyPrefix = "notify-"
)

// AgentToken turns an agent name into the token used in subjects: lower case,
// every character outside [a-z0-9_-] replaced by '_'. An empty name becomes "_".
func AgentToken(agent string) string {
	if agent == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(agent))
	for _, r := range strings.ToLower(agent) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ToolRequestedSubject is where a tool approval request for agent is published.
func ToolRequestedSubject(agent string) string { return SubjectToolRequestedPrefix + AgentToken(agent) }

// InputRequestedSubject is where a human input request for agent is published.
func InputRequestedSubject(agent string) string {
	return SubjectInputRequestedPrefix + AgentToken(agent)
}

// ResolvedSubject is where votes on an approval are published.
func ResolvedSubject(eventID string) string { return SubjectResolvedPrefix + eventID }

// CommandSubject is where commands (claim, cancel, extend) on an approval are published.
func CommandSubject(eventID string) string { return SubjectCommandPrefix + eventID }

// ClaimSubject is where a claim on an approval is asked for by NATS
// request (see SubjectClaimPrefix).
func ClaimSubject(eventID string) string { return SubjectClaimPrefix + eventID }

// RecordCopySubject is where the server republishes the writes of record
// eventID (see SubjectRecordPrefix).
func RecordCopySubject(eventID string) string { return SubjectRecordPrefix + eventID }

// VoteSubject is where a resolver asks the arbiter to apply a vote by
// request (see SubjectVotePrefix).
func VoteSubject(eventID string) string { return SubjectVotePrefix + eventID }

// Headers of a claim request's reply that was not handled.
const (
	HeaderClaimError        = "Countersign-Claim-Error"
	HeaderClaimErrorMessage = "Countersign-Claim-Error-Message"
	// HeaderVoteError and HeaderVoteErrorMessage are those of a vote
	// request's reply (see SubjectVotePrefix).
	HeaderVoteError        = "Countersign-Vote-Error"
	HeaderVoteErrorMessage = "Countersign-Vote-Error-Message"
)

// DecidedSubject is where the arbiter announces an approval's terminal outcome.
func DecidedSubject(eventID string) string { return SubjectDecidedPrefix + eventID }

// CreatedSubject is where the creation of an approval's record is told.
func CreatedSubject(eventID string) string { return SubjectCreatedPrefix + eventID }

// ReadSubject is where reads of an approval are recorded.
func ReadSubject(eventID string) string { return SubjectReadPrefix + eventID }

// ChangedSubject is where the arbiter announces non-terminal changes of a record.
func ChangedSubject(eventID string) string { return SubjectChangedPrefix + eventID }

// TimerScheduleSubject holds the one schedule of timer kind for an approval;
// publishing a new schedule there replaces the previous one.
func TimerScheduleSubject(eventID, kind string) string {
	return SubjectTimerSchedulePrefix + eventID + "." + kind
}

// TimerFireSubject is where the server publishes a timer when it fires.
func TimerFireSubject(eventID, kind string) string {
	return SubjectTimerFirePrefix + eventID + "." + kind
}

// DeadLetterSubject is where a consumer of stream copies a message it cannot process.
func DeadLetterSubject(stream string) string { return SubjectDeadLetterPrefix + stream }

// ValidEventID reports whether id can be used as a subject token and KV key:
// 1 to 64 characters of [A-Za-z0-9_-].
func ValidEventID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

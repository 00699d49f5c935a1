package embedded

import (
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
)

// Role is what a NATS user may do on the Countersign bus.
type Role string

// The Countersign roles. Only the arbiter writes approval records; only the
// admin manages streams, buckets and consumers.
const (
	// RoleAdmin may do everything. It provisions streams and buckets at
	// start-up and is used for nothing else.
	RoleAdmin Role = "admin"
	// RoleArbiter consumes requests, votes and commands, answers claim
	// requests, and is the only
	// writer of the hitl_approvals bucket. It reads the applied policy
	// versions in hitl_policy (and the live key's history) to check each
	// request against the version it names.
	RoleArbiter Role = "arbiter"
	// RoleOrchestrator publishes requests and commands and watches records.
	RoleOrchestrator Role = "orchestrator"
	// RoleResolver publishes votes and watches records.
	RoleResolver Role = "resolver"
	// RoleAPI is orchestrator plus resolver, reads the request and event
	// streams for timelines and live updates, writes the hitl_policy bucket, is the
	// only role that reads or writes the inbox sessions in hitl_sessions, and
	// records receipt uses in hitl_receipt_uses.
	RoleAPI Role = "api"
	// RoleNotifier consumes requests and events, publishes delivery receipts
	// and reads them back with message gets. It reads and watches the live
	// directory's key in hitl_policy, and nothing else of that bucket.
	RoleNotifier Role = "notifier"
)

// Roles lists every role.
var Roles = []Role{RoleAdmin, RoleArbiter, RoleOrchestrator, RoleResolver, RoleAPI, RoleNotifier}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// GenerateUsers returns one user per role, named after the role, with a
// random password (32 bytes from crypto/rand, base64url without padding).
func GenerateUsers(roles ...Role) []User {
	users := make([]User, 0, len(roles))
	for _, r := range roles {
		var b [32]byte
		_, _ = rand.Read(b[:]) // never fails; a broken source crashes the program
		users = append(users, User{Name: string(r), Password: base64.RawURLEncoding.EncodeToString(b[:]), Role: r})
	}
	return users
}

// Stream names the bucket streams are stored in.
const (
	streamApprovals   = "KV_" + contracts.BucketApprovals
	streamPolicy      = "KV_" + contracts.BucketPolicy
	streamSessions    = "KV_" + contracts.BucketSessions
	streamGrants      = "KV_" + contracts.BucketGrants
	streamReceipts    = "KV_" + contracts.BucketReceipts
	streamReceiptUses = "KV_" + contracts.BucketReceiptUses
	streamPasskeys    = "KV_" + contracts.BucketPasskeys
	streamPush        = "KV_" + contracts.BucketPush
)

// InboxPrefix is the prefix of the inboxes a role's connections receive
// replies on (nats.CustomInboxPrefix): _INBOX_<role>. A role may subscribe
// to its own inboxes only, so no credential hears the replies another
// role gets. Admin keeps the client's default, _INBOX.
func InboxPrefix(r Role) string {
	if r == RoleAdmin || r == "" {
		return strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return "_INBOX_" + string(r)
}

// InboxOption is the connection option that puts a role's inboxes under
// its InboxPrefix.
func InboxOption(r Role) nats.Option { return nats.CustomInboxPrefix(InboxPrefix(r)) }

// InboxOptionFor is InboxOption of the role whose user is named user (the
// users serve and deploy/ make are named after their roles), and the
// client's default for any other user.
func InboxOptionFor(user string) nats.Option {
	for _, r := range Roles {
		if string(r) == user {
			return InboxOption(r)
		}
	}
	return func(*nats.Options) error { return nil }
}

// Permissions returns the NATS permissions of role: a fresh value each call.
// An unknown role may do nothing at all.
//
// Every role but admin is denied stream management (create, update, delete,
// purge, message delete, snapshot, restore) and deleting consumers of the
// Countersign streams; every role but admin and arbiter is denied writing
// approval records, standing grants and receipts, every role but admin
// and api writing the policy, the inbox sessions or the passkeys, and every
// role but admin, api and notifier writing the push subscriptions.
func Permissions(r Role) *server.Permissions { return PermissionsWith(r, nil) }

// PermissionsWith is Permissions with the durables more protected as
// Durables are (see Config.Durables).
func PermissionsWith(r Role, more []Durable) *server.Permissions {
	var g grant
	switch r {
	case RoleAdmin:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}
	case RoleArbiter:
		g.arbiter()
	case RoleOrchestrator:
		g.orchestrator()
	case RoleResolver:
		g.resolver()
	case RoleAPI:
		g.api()
	case RoleNotifier:
		g.notifier()
	default:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Deny: []string{">"}},
			Subscribe: &server.SubjectPermission{Deny: []string{">"}},
		}
	}
	// Everyone: JetStream account info, and replies (publish acks, API
	// responses, KV reads, consumer deliveries) on the role's own inboxes:
	// never on another role's, whose replies carry what that role alone
	// may read (receipts, sessions, passkeys).
	g.pub("$JS.API.INFO")
	g.sub(InboxPrefix(r) + ".>")
	g.denyPub(managementDeny...)
	g.protectDurables(r, append(slices.Clone(Durables), more...))
	if r != RoleArbiter {
		g.denyPub(kvWrite(contracts.BucketApprovals), kvWrite(contracts.BucketGrants), kvWrite(contracts.BucketReceipts))
	}
	if r != RoleAPI {
		g.denyPub(kvWrite(contracts.BucketPolicy), kvWrite(contracts.BucketSessions), kvWrite(contracts.BucketPasskeys))
	}
	if r != RoleAPI && r != RoleNotifier {
		g.denyPub(kvWrite(contracts.BucketPush))
	}
	return g.permissions()
}

// arbiter is the arbiter's grant: the one writer of records, grants and
// receipts.
func (g *grant) arbiter() {
	g.pub(kvWrite(contracts.BucketApprovals))
	// Standing grants: written by the arbiter alone; issued and
	// revoked are recorded in the grant's timeline.
	g.pub(kvWrite(contracts.BucketGrants))
	g.pub(kvRead(streamGrants)...)
	g.pub(contracts.SubjectGrantIssuedPrefix+">", contracts.SubjectGrantRevokedPrefix+">")
	// Receipts of accepted claims: written by the arbiter alone.
	g.pub(kvWrite(contracts.BucketReceipts))
	g.pub(kvRead(streamReceipts)...)
	// A voter's passkeys, read when a step-up approval is counted.
	g.pub(kvRead(streamPasskeys)...)
	g.pub(kvRead(streamApprovals)...)
	g.pub(kvWatch(streamApprovals)...)
	// At start: the records written last (an ordered consumer's pulls),
	// and whether their decisions were announced (services/arbiter/sweep.go).
	g.pub("$JS.API.CONSUMER.MSG.NEXT." + streamApprovals + ".>")
	g.pub("$JS.API.STREAM.INFO."+contracts.StreamEvents, "$JS.API.STREAM.MSG.GET."+contracts.StreamEvents)
	g.pub(kvRead(streamPolicy)...)
	g.pub(kvWatch(streamPolicy)...)
	g.pub(durableConsumer(contracts.StreamRequests)...)
	g.pub(durableConsumer(contracts.StreamResolutions)...)
	g.pub(durableConsumer(contracts.StreamTimers)...)
	// Grant uses, which the gates record on HITL_EVENTS, are logged in
	// the audit log by the arbiter's own durable there.
	g.pub(durableConsumer(contracts.StreamEvents)...)
	g.pub(
		contracts.SubjectDecidedPrefix+">",
		contracts.SubjectChangedPrefix+">",
		contracts.SubjectCreatedPrefix+">",
		contracts.SubjectDeadLetterPrefix+">",
		subjectTimerPrefix+">",
	)
	// The audit log: appended by the arbiter alone, which reads it back
	// to sign checkpoints.
	g.pub(audit.SubjectPrefix + ">")
	g.pub(orderedConsumer(audit.Stream)...)
	// Automated reviewers' opinions: published by the arbiter alone,
	// which asks the reviewers, and recorded by it from the stream.
	g.pub(contracts.SubjectOpinionPrefix + ">")
	// Claim and vote requests: answered on the requester's inbox, the
	// inboxes of the roles that may ask, and nowhere else. Not with
	// allow_responses: that lets a requester name any subject as the
	// reply, and the answer, published with the arbiter's rights, would
	// be a JetStream API call (a purge of the records) or a record write.
	g.sub(contracts.SubjectClaimPrefix+">", contracts.SubjectVotePrefix+">")
	for _, r := range askers() {
		g.pub(InboxPrefix(r) + ".>")
	}
}

// askers are the roles that may ask the arbiter for a claim or a vote by
// request (publish on contracts.SubjectClaimPrefix or SubjectVotePrefix).
func askers() []Role {
	var out []Role
	for _, r := range Roles {
		if r == RoleAdmin || r == RoleArbiter {
			continue
		}
		allow := Permissions(r).Publish.Allow
		if slices.Contains(allow, contracts.SubjectClaimPrefix+">") || slices.Contains(allow, contracts.SubjectVotePrefix+">") {
			out = append(out, r)
		}
	}
	return out
}

// api is the API's grant: an orchestrator and a resolver that also keeps
// the policy, the inbox sessions, receipt uses and passkeys.
func (g *grant) api() {
	g.orchestrator()
	g.resolver()
	// The live feed (GET /v1/events, the inbox) follows new requests
	// and the decided and changed events with ordered consumers.
	g.pub(orderedConsumer(contracts.StreamRequests)...)
	g.pub(orderedConsumer(contracts.StreamEvents)...)
	// The audit log is read for exports, never written.
	g.pub(orderedConsumer(audit.Stream)...)
	g.pub(kvWrite(contracts.BucketPolicy))
	g.pub(kvWrite(contracts.BucketSessions))
	// Reads of sensitive approvals and audit exports are recorded.
	g.pub(contracts.SubjectReadPrefix + ">")
	g.pub(kvRead(streamSessions)...)
	// Receipt uses (POST /v1/receipts/use): created once with KV
	// Create, which reads the key when it exists.
	g.pub(kvWrite(contracts.BucketReceiptUses))
	g.pub(kvRead(streamReceiptUses)...)
	// Passkeys: enrolled and revoked through the inbox, listed for the
	// approvers document.
	g.pub(kvWrite(contracts.BucketPasskeys))
	g.pub(kvRead(streamPasskeys)...)
	g.pub(kvWatch(streamPasskeys)...)
	// Push subscriptions: added and removed by their people.
	g.pub(kvWrite(contracts.BucketPush))
	g.pub(kvRead(streamPush)...)
}

// notifier is the notifier's grant.
func (g *grant) notifier() {
	g.pub(kvRead(streamApprovals)...)
	g.pub(kvWatch(streamApprovals)...)
	g.pub(durableConsumer(contracts.StreamRequests)...)
	g.pub(durableConsumer(contracts.StreamEvents)...)
	// Receipts are read back with message gets from the stream leader.
	g.pub("$JS.API.STREAM.MSG.GET." + contracts.StreamEvents)
	g.pub(contracts.SubjectNotifyPrefix+">", contracts.SubjectDeadLetterPrefix+">")
	// Who may be told of a request is judged by the live directory:
	// read and watch its one key in hitl_policy, nothing else there.
	g.pub(keyRead(streamPolicy, contracts.BucketPolicy, contracts.DirectoryKey)...)
	// Push subscriptions: read to deliver, and a subscription the push
	// service says is gone is dropped.
	g.pub(kvWrite(contracts.BucketPush))
	g.pub(kvRead(streamPush)...)
	// Openings of an approval (hitl.approval.read) hold back the later
	// stages of a staggered notification: read with message gets.
	//
	// The audit log, never written: each audit sink (notifier/auditsink)
	// reads it with its own durable consumer, audit-sink-<name>, and
	// acknowledges an entry once the sink took it. The other roles that
	// read HITL_AUDIT (arbiter, api) hold no acknowledgment there.
	g.pub(durableConsumer(audit.Stream)...)
}

// subjectTimerPrefix is where the arbiter schedules and receives its timers.
const subjectTimerPrefix = "hitl.timer."

// managementDeny is denied to every role but admin.
var managementDeny = func() []string {
	s := []string{
		"$JS.API.STREAM.CREATE.>",
		"$JS.API.STREAM.UPDATE.>",
		"$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>",
		"$JS.API.STREAM.MSG.DELETE.>",
		"$JS.API.STREAM.SNAPSHOT.>",
		"$JS.API.STREAM.RESTORE.>",
		"$JS.API.ACCOUNT.PURGE.>",
	}
	for _, stream := range []string{
		contracts.StreamRequests, contracts.StreamResolutions, contracts.StreamEvents,
		contracts.StreamTimers, contracts.StreamDeadLetter, audit.Stream, contracts.StreamHistory,
	} {
		s = append(s, "$JS.API.CONSUMER.DELETE."+stream+".>")
	}
	return s
}()

// grant accumulates allowed and denied subjects.
type grant struct {
	pubAllow, pubDeny, subAllow []string
}

func (g *grant) pub(s ...string)     { g.pubAllow = append(g.pubAllow, s...) }
func (g *grant) denyPub(s ...string) { g.pubDeny = append(g.pubDeny, s...) }
func (g *grant) sub(s ...string)     { g.subAllow = append(g.subAllow, s...) }

// orchestrator: publish requests and commands, read and watch records and
// the policy.
func (g *grant) orchestrator() {
	g.pub(
		contracts.SubjectToolRequestedPrefix+">",
		contracts.SubjectInputRequestedPrefix+">",
		contracts.SubjectCommandPrefix+">",
		contracts.SubjectClaimPrefix+">",
	)
	g.pub(kvRead(streamApprovals)...)
	g.pub(kvWatch(streamApprovals)...)
	g.pub(kvRead(streamPolicy)...)
	g.pub(kvWatch(streamPolicy)...)
	// Standing grants: every gate watches them and records each use.
	g.pub(kvRead(streamGrants)...)
	g.pub(kvWatch(streamGrants)...)
	g.pub(contracts.SubjectGrantUsedPrefix + ">")
	// Receipts: a claimant reads the one its claim got (bearer tokens, so
	// neither the resolver nor the notifier reads them).
	g.pub(kvRead(streamReceipts)...)
	g.pub(kvWatch(streamReceipts)...)
	// Decision pools (orchestrator.DecisionPool): durable consumers of the
	// decided events, shared by a pool of workers, acknowledged by them.
	g.pub(durableConsumer(contracts.StreamEvents)...)
	// A waiter follows the announcements of the records it waits on, and
	// the copies of their writes the server republishes.
	g.sub(contracts.SubjectCreatedPrefix+">", contracts.SubjectChangedPrefix+">", contracts.SubjectDecidedPrefix+">",
		contracts.SubjectRecordPrefix+">")
	// The history of reviewed calls: every gate appends the calls it
	// reviews and follows the others' with an ordered consumer.
	g.pub(contracts.SubjectHistoryPrefix + ">")
	g.pub(orderedConsumer(contracts.StreamHistory)...)
}

// Durable is a durable consumer of a Countersign role.
type Durable struct {
	Stream, Name string
	Owner        Role
}

// Durables are the durable consumers the roles run (arbiter.Durable*,
// dispatch.Durable*; a test keeps the lists equal). A role that may create
// consumers on a stream may neither change nor acknowledge another role's
// durables there: one credential cannot skip, stall or re-filter another
// role's work.
var Durables = []Durable{
	{contracts.StreamRequests, "arbiter-requests", RoleArbiter},
	{contracts.StreamResolutions, "arbiter-resolutions", RoleArbiter},
	{contracts.StreamTimers, "arbiter-timers", RoleArbiter},
	{contracts.StreamEvents, "arbiter-grant-uses", RoleArbiter},
	{contracts.StreamRequests, "notifier", RoleNotifier},
	{contracts.StreamEvents, "notifier-decided", RoleNotifier},
	{contracts.StreamEvents, "notifier-changes", RoleNotifier},
}

// protectDurables denies r the durables of other roles on the streams r
// may create consumers on.
func (g *grant) protectDurables(r Role, durables []Durable) {
	for _, d := range durables {
		if d.Owner == r || !slices.ContainsFunc(g.pubAllow, func(s string) bool {
			return strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE."+d.Stream)
		}) {
			continue
		}
		g.denyPub(
			"$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name,
			"$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+d.Stream+"."+d.Name,
			"$JS.ACK."+d.Stream+"."+d.Name+".>",
			"$JS.ACK.*.*."+d.Stream+"."+d.Name+".>",
		)
	}
}

// resolver: publish votes (stored, or as requests the arbiter answers),
// read and watch records.
func (g *grant) resolver() {
	g.pub(contracts.SubjectResolvedPrefix+">", contracts.SubjectVotePrefix+">")
	g.pub(kvRead(streamApprovals)...)
	g.pub(kvWatch(streamApprovals)...)
}

func (g *grant) permissions() *server.Permissions {
	clean := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: clean(g.pubAllow), Deny: clean(g.pubDeny)},
		Subscribe: &server.SubjectPermission{Allow: clean(g.subAllow)},
	}
}

// kvWrite is the subject space of a bucket's keys: publishing there writes.
func kvWrite(bucket string) string { return "$KV." + bucket + ".>" }

// kvRead binds a bucket (stream info) and reads keys with stream message
// gets. Never direct gets: a direct get's answer is the stored message
// itself, published by the server on whatever reply subject the requester
// names, so a reader could have the server store a copy of one record as
// another (events.Provision turns them off on every bucket).
func kvRead(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
	}
}

// keyRead binds a bucket (stream info) and reads and watches one key alone
// with a watch of it: an ordered consumer filtered on the key (created with
// the filter in the subject, as the client does), its flow control, and
// deleting it when the watch stops. No message gets: one names its key in
// the request's body, which no grant can pin to a key.
func keyRead(stream, bucket, key string) []string {
	subject := "$KV." + bucket + "." + key
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".*." + subject,
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.FC." + stream + ".>",
		"$JS.FC.*.*." + stream + ".>",
	}
}

// kvWatch lets a client watch a bucket. A watcher is an ephemeral ordered
// push consumer: creating it, answering its flow control (both subject
// formats), and deleting it, which the client does when the watch stops
// (without that right, stopping a watch waits for a request timeout). The
// bucket streams have no durable consumers, so deleting is harmless there.
func kvWatch(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.FC." + stream + ".>",
		"$JS.FC.*.*." + stream + ".>",
	}
}

// durableConsumer lets a client create (or update) a durable pull consumer
// on stream, fetch from it and acknowledge (ack, nak, term, in progress) in
// both ack subject formats. It cannot delete consumers.
func durableConsumer(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>",
		"$JS.ACK.*.*." + stream + ".>",
	}
}

// orderedConsumer lets a client read stream from any point with ephemeral
// ordered consumers (pull or push with flow control) and get single
// messages. It cannot acknowledge or delete consumers; an ordered consumer
// left behind expires on its inactivity threshold.
func orderedConsumer(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.FC." + stream + ".>",
		"$JS.FC.*.*." + stream + ".>",
	}
}

package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
)

// ProvisionConfig sizes the streams and buckets.
type ProvisionConfig struct {
	// Replicas of every stream and bucket (1 for a single server, 3 for a cluster).
	Replicas int
	// Retention bounds how long approvals and their events are kept. No
	// request may time out later than this. Default 30 days.
	Retention time.Duration
	// DuplicateWindow is the Nats-Msg-Id de-duplication window. Default 2 minutes.
	DuplicateWindow time.Duration
	// Memory stores everything in memory (tests and benchmarks only).
	Memory bool
}

// DefaultRetention is how long approvals are kept unless configured otherwise.
const DefaultRetention = 30 * 24 * time.Hour

func (c *ProvisionConfig) setDefaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
}

func (c *ProvisionConfig) validate() error {
	var errs []error
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("events: ProvisionConfig.Replicas must be 1..5, got %d", c.Replicas))
	}
	if c.DuplicateWindow > c.Retention {
		errs = append(errs, errors.New("events: ProvisionConfig.DuplicateWindow must not exceed Retention"))
	}
	return errors.Join(errs...)
}

// StreamConfigs returns the configuration of every stream of the contract.
func StreamConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	cfg.setDefaults()
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	base := func(name, desc string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subjects,
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      cfg.Retention,
			Storage:     storage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
		}
	}
	timers := base(contracts.StreamTimers, "Countersign durable timers (JetStream message schedules)",
		contracts.SubjectTimerPrefix+">")
	// The server allows roll-ups on a stream of message schedules (a
	// schedule's replacement rolls up its subject); saying so keeps the
	// configuration the server reports equal to this one.
	timers.AllowMsgSchedules, timers.AllowRollup = true, true
	// A decided approval's timers still ahead are withdrawn by a roll-up
	// message that expires a second later (arbiter: cancelTimers), so the
	// store keeps nothing per decided approval for its timers.
	timers.AllowMsgTTL = true
	// The audit log is append-only: no message of it may be deleted and
	// the stream may not be purged; only its age retires entries.
	auditLog := base(audit.Stream, "Countersign tamper-evident audit log: entries and signed checkpoints; written by the arbiter only",
		audit.SubjectPrefix+">")
	auditLog.DenyDelete, auditLog.DenyPurge = true, true
	// The history of reviewed calls, which history conditions read: kept
	// for the retention, which bounds their windows (a gate refuses to
	// count further back than the stream keeps).
	history := base(contracts.StreamHistory, "Countersign history of reviewed calls (history conditions); appended by every gate",
		contracts.SubjectHistoryPrefix+">")
	return []jetstream.StreamConfig{
		base(contracts.StreamRequests, "Countersign approval and human input requests",
			contracts.SubjectToolRequestedPrefix+">", contracts.SubjectInputRequestedPrefix+">"),
		base(contracts.StreamResolutions, "Countersign votes, commands and reviewers' opinions",
			contracts.SubjectResolvedPrefix+">", contracts.SubjectCommandPrefix+">", contracts.SubjectOpinionPrefix+">"),
		base(contracts.StreamEvents, "Countersign outcomes, changes and notification receipts",
			contracts.SubjectDecidedPrefix+">", contracts.SubjectChangedPrefix+">", contracts.SubjectNotifyPrefix+">",
			contracts.SubjectReadPrefix+">", contracts.SubjectGrantPrefix+">"),
		timers,
		base(contracts.StreamDeadLetter, "Countersign messages no consumer could process",
			contracts.SubjectDeadLetterPrefix+">"),
		auditLog,
		history,
	}
}

// tuneBucket sets, after a bucket's create-or-update (which sets what
// KeyValueConfig says and leaves the rest at the server's defaults), the
// stream settings KeyValueConfig cannot express, with one read of the
// stream and at most one update:
//
//   - direct gets off, on every bucket. A direct get answers with the stored
//     message itself, headers and value, on whatever reply subject the
//     requester names, and the server publishes that answer with its own
//     rights: a reader of the approvals bucket naming $KV.hitl_approvals.<B>
//     as the reply had the server store a copy of record A (approved) as
//     record B, and a reader of the policy bucket could put an older policy
//     or directory back as the live one. A stream message get answers with
//     the message wrapped in a JSON envelope, which no reader takes for a
//     record, a policy or a grant. Reads also go to the stream's leader,
//     which has every acknowledged write (a follower that is behind answers
//     with an old record: a decision not seen yet).
//   - watchers gives the stream room for FleetWatchers consumers.
//   - every bucket keeps one value per key, and its stream takes a second
//     message on a key only as a roll-up (discard new per subject, one
//     message per subject): the writers write every revision after the
//     first so (events.RecordWriter, UpdateKey), and nothing the server
//     publishes on a key as the answer to a request whose reply names it
//     (an account info, a message get's envelope, a publish
//     acknowledgement) replaces a record, a policy, a grant or a person's
//     passkeys or devices.
func tuneBucket(ctx context.Context, js jetstream.JetStream, bucket string, watchers bool) error {
	stream := "KV_" + bucket
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("events: provision %s: %w", stream, err)
	}
	sc := st.CachedInfo().Config
	changed := false
	if sc.AllowDirect {
		sc.AllowDirect, changed = false, true
	}
	if watchers && sc.MaxConsumers != FleetWatchers {
		sc.MaxConsumers, changed = FleetWatchers, true
	}
	if !sc.DiscardNewPerSubject {
		sc.DiscardNewPerSubject, changed = true, true
	}
	if !changed {
		return nil
	}
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("events: provision %s: %w", stream, err)
	}
	return nil
}

// bucketConfig is a bucket of cfg's storage and replicas.
func bucketConfig(cfg ProvisionConfig, bucket, description string, history uint8, ttl time.Duration) jetstream.KeyValueConfig {
	cfg.setDefaults()
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	return jetstream.KeyValueConfig{
		Bucket: bucket, Description: description, History: history, TTL: ttl,
		Storage: storage, Replicas: cfg.Replicas,
	}
}

// ApprovalsBucketConfig returns the configuration of the hitl_approvals bucket.
func ApprovalsBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	cfg.setDefaults()
	kv := bucketConfig(cfg, contracts.BucketApprovals, "Countersign approval records; written by the arbiter only", 1, cfg.Retention)
	// Every write is republished once stored, so a waiter is woken by the
	// write itself (contracts.SubjectRecordPrefix).
	kv.RePublish = &jetstream.RePublish{Source: "$KV." + contracts.BucketApprovals + ".>", Destination: contracts.SubjectRecordPrefix + ">"}
	return kv
}

// PolicyBucketConfig returns the configuration of the hitl_policy bucket: the
// fleet's live policy and the live directory under a key each, and every
// applied policy version under a key of its own (contracts.PolicyVersionKey),
// one value a key. Its stream takes a second message on a key only as a
// roll-up, like the records' (tuneBucket), so nothing the server publishes
// on the live policy's or the directory's key as the answer to someone's
// request replaces them. Policies never expire.
func PolicyBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	return bucketConfig(cfg, contracts.BucketPolicy, "Countersign live policy, directory and applied policy versions; written through the API", 1, 0)
}

// SessionsTTL is how long a web inbox session lives after sign-in; the
// sessions bucket drops a session's entry then, whatever else happens.
const SessionsTTL = 12 * time.Hour

// SessionsBucketConfig returns the configuration of the hitl_sessions
// bucket: one entry per signed-in inbox session, keyed by a hash of the
// session id, so that every API replica knows every session and a sign-out
// on one ends it on all.
func SessionsBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	return bucketConfig(cfg, contracts.BucketSessions, "Countersign web inbox sessions; written and read by the API only", 1, SessionsTTL)
}

// GrantsBucketConfig returns the configuration of the hitl_grants bucket:
// standing grants, written by the arbiter only, kept as long as records
// (no grant outlives the retention; revoked and expired ones stay for audit
// until then).
func GrantsBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	cfg.setDefaults()
	return bucketConfig(cfg, contracts.BucketGrants, "Countersign standing grants; written by the arbiter only", 1, cfg.Retention)
}

// ReceiptsBucketConfig returns the configuration of the hitl_receipts
// bucket: the receipt of each accepted claim, written by the arbiter only
// and read by the roles that claim, kept as long as records.
func ReceiptsBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	cfg.setDefaults()
	return bucketConfig(cfg, contracts.BucketReceipts, "Countersign claim receipts; written by the arbiter only", 1, cfg.Retention)
}

// ReceiptUsesBucketConfig returns the configuration of the
// hitl_receipt_uses bucket: one entry per receipt a tool used (POST
// /v1/receipts/use), created once, written by the API only, and dropped
// contracts.ReceiptUseHorizon after its write — after the receipt it
// records has expired.
func ReceiptUsesBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	return bucketConfig(cfg, contracts.BucketReceiptUses, "Countersign receipt uses (single use across a tool's replicas); written by the API only", 1, contracts.ReceiptUseHorizon)
}

// PasskeysBucketConfig returns the configuration of the hitl_passkeys
// bucket: each person's enrolled passkeys (public keys only) and the
// relying party, written by the API only, read by the arbiter when it
// counts a step-up approval. Kept until revoked and beyond (a revoked
// passkey stays listed, with when and by whom). One value a key, replaced
// with a roll-up (tuneBucket).
func PasskeysBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	return bucketConfig(cfg, contracts.BucketPasskeys, "Countersign passkeys (public keys); written by the API only", 1, 0)
}

// PushBucketConfig returns the configuration of the hitl_push bucket:
// each person's Web Push subscriptions, written by the API (subscribe,
// remove) and by the notifier (which drops a subscription its push service
// says is gone), read by the notifier when it delivers.
func PushBucketConfig(cfg ProvisionConfig) jetstream.KeyValueConfig {
	return bucketConfig(cfg, contracts.BucketPush, "Countersign Web Push subscriptions; written by the API and the notifier", 1, 0)
}

// Provision creates or updates every stream and bucket of the contract. It is
// idempotent and safe to run from several processes at once. On a cluster
// (Replicas > 1) it returns once every stream and bucket has a leader and
// its replicas are current, so that the roles started next find them
// answering.
//
// A cluster that is forming refuses or drops requests for a while (no peers
// to place replicas on yet, no meta leader, a stream leader being elected);
// those are retried until ctx ends, each pass bounded by provisionAttempt,
// and an error then says what was waited for.
func Provision(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	replicated := cfg.Replicas > 1
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, provisionAttempt)
		err := provision(actx, js, cfg)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return notInTime(err)
		}
		if !passes(ctx, err, replicated) {
			return err
		}
		select {
		case <-ctx.Done():
			return notInTime(err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	if !replicated {
		return nil
	}
	return awaitPlaced(ctx, js, streamNames(cfg))
}

// notInTime is Provision's error when its context ends first.
func notInTime(err error) error {
	return fmt.Errorf("events: provision: the servers did not accept every stream and bucket in time (for a cluster: no meta leader, or its peers not seen yet): %w", err)
}

func provision(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	for _, sc := range StreamConfigs(cfg) {
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	for _, b := range provisionedBuckets(cfg) {
		if err := keepWhatHistoryHolds(ctx, js, b.cfg.Bucket); err != nil {
			return err
		}
		if err := ensureBucket(ctx, js, b.cfg, b.watchers); err != nil {
			return err
		}
	}
	return nil
}

// provisionedBucket is a bucket of the contract and how its stream is
// tuned (tuneBucket).
type provisionedBucket struct {
	cfg      jetstream.KeyValueConfig
	watchers bool
}

// provisionedBuckets are the contract's buckets. Every agent process
// watches the policy and the grants.
func provisionedBuckets(cfg ProvisionConfig) []provisionedBucket {
	cfg.setDefaults()
	return []provisionedBucket{
		{ApprovalsBucketConfig(cfg), false},
		// The live policy and directory: replaced with a roll-up; the
		// versions: created once.
		{PolicyBucketConfig(cfg), true},
		{SessionsBucketConfig(cfg), false},
		// Grants: created once, revoked with a roll-up (UpdateKey).
		{GrantsBucketConfig(cfg), true},
		// Written once per key (KV Create), never replaced: a second
		// message on a key is refused like a record's.
		{ReceiptsBucketConfig(cfg), false},
		{ReceiptUsesBucketConfig(cfg), false},
		// Each person's passkeys and push subscriptions: replaced with a
		// roll-up.
		{PasskeysBucketConfig(cfg), false},
		{PushBucketConfig(cfg), false},
	}
}

// FleetWatchers is how many consumers the hitl_policy and hitl_grants
// buckets' streams allow. Every agent process that links the Go library
// watches both (its gate's live policy and standing grants: small buckets
// that change seldom), so each process holds one consumer on each. The
// server's default of 1,000 consumers per stream would refuse the gates of
// a fleet past about a thousand processes.
const FleetWatchers = 100_000

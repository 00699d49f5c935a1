package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/policy"
)

// SpecPolicyDocument names the value stored under PolicyKey in hitl_policy.
const SpecPolicyDocument = contracts.SpecPolicyDocument

// PolicyKey is the key of the live policy in the hitl_policy bucket.
const PolicyKey = contracts.PolicyKey

// PolicyVersionsPrefix opens the key of every applied policy version in
// hitl_policy (contracts.PolicyVersionKey).
const PolicyVersionsPrefix = contracts.PolicyVersionsPrefix

// PolicyVersionKey is the hitl_policy key of a policy version
// (contracts.PolicyVersionKey).
func PolicyVersionKey(version string) string { return contracts.PolicyVersionKey(version) }

// ErrUnknownPolicyVersion means no policy with the version was ever applied
// to the bucket (or the history that still holds it has moved on).
var ErrUnknownPolicyVersion = errors.New("unknown_policy_version: no applied policy has this version")

// ReadPolicyVersion returns the stored document of an applied policy
// version: from its own key, or, for a version applied before versions had
// keys of their own, from the history of the live policy's key. It returns
// ErrUnknownPolicyVersion when neither holds it.
func ReadPolicyVersion(ctx context.Context, kv jetstream.KeyValue, version string) (PolicyDocument, error) {
	e, err := kv.Get(ctx, PolicyVersionKey(version))
	switch {
	case err == nil:
		doc, derr := decodePolicyDocument(e.Value())
		if derr != nil || doc.Version != version {
			return PolicyDocument{}, fmt.Errorf("%w: the document stored for it is unreadable", ErrUnknownPolicyVersion)
		}
		return doc, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return PolicyDocument{}, fmt.Errorf("orchestrator: read policy version %q: %w", version, err)
	}
	history, err := kv.History(ctx, PolicyKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrNoKeysFound) {
		return PolicyDocument{}, ErrUnknownPolicyVersion
	}
	if err != nil {
		return PolicyDocument{}, fmt.Errorf("orchestrator: read the history of the live policy: %w", err)
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		if doc, err := decodePolicyDocument(history[i].Value()); err == nil && doc.Version == version {
			return doc, nil
		}
	}
	return PolicyDocument{}, ErrUnknownPolicyVersion
}

func decodePolicyDocument(value []byte) (PolicyDocument, error) {
	var doc PolicyDocument
	if err := json.Unmarshal(value, &doc); err != nil {
		return doc, err
	}
	if doc.Spec != SpecPolicyDocument {
		return doc, fmt.Errorf("unknown spec %q", doc.Spec)
	}
	return doc, nil
}

// ErrPolicyVersionExists means a policy with the same version but other
// content was already applied: a changed policy needs a new version.
var ErrPolicyVersionExists = errors.New("version_exists: a policy with this version and other content was already applied; bump the version")

// ErrPolicyConflict means another apply changed the live policy at the same time.
var ErrPolicyConflict = errors.New("policy_conflict: the live policy changed while applying; try again")

// PolicyDocument is the live policy as stored: its YAML source and who put it there.
type PolicyDocument struct {
	Spec      string    `json:"spec"`
	Version   string    `json:"version"`
	SHA256    string    `json:"sha256"`
	Source    string    `json:"source"`
	AppliedBy string    `json:"applied_by"`
	AppliedAt time.Time `json:"applied_at"`
}

// PolicyStore keeps the fleet's live policy: it reads hitl_policy at start,
// watches it, and switches atomically to each new version. It is a
// PolicySource for the Gate. Until a policy is stored it serves the
// fallback; a stored document that does not compile is ignored (the
// previous policy stays in force) and logged.
type PolicyStore struct {
	kv       jetstream.KeyValue
	log      *slog.Logger
	fallback *policy.Policy
	onChange func(PolicyDocument)

	cur     atomic.Pointer[livePolicy]
	watcher jetstream.KeyWatcher
	done    sync.WaitGroup

	// switched is closed and replaced at every switch.
	mu       sync.Mutex
	switched chan struct{}
}

type livePolicy struct {
	p        *policy.Policy
	doc      PolicyDocument
	revision uint64
}

// PolicyStoreConfig configures OpenPolicyStore.
type PolicyStoreConfig struct {
	JS jetstream.JetStream
	// Fallback serves until a policy is stored (default policy.Default()).
	Fallback *policy.Policy
	Logger   *slog.Logger
	// OnChange is called after each switch to a new stored policy.
	OnChange func(PolicyDocument)
}

// OpenPolicyStore reads the live policy and starts watching for new ones.
// When it returns, Current reflects what was stored at that moment.
func OpenPolicyStore(ctx context.Context, cfg PolicyStoreConfig) (*PolicyStore, error) {
	if cfg.JS == nil {
		return nil, errors.New("orchestrator: PolicyStoreConfig.JS is required")
	}
	if cfg.Fallback == nil {
		cfg.Fallback = policy.Default()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := cfg.JS.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketPolicy, err)
	}
	s := &PolicyStore{kv: kv, log: cfg.Logger, fallback: cfg.Fallback, onChange: cfg.OnChange, switched: make(chan struct{})}
	e, err := kv.Get(ctx, PolicyKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("orchestrator: read the live policy: %w", err)
	default:
		s.install(e)
	}
	w, err := kv.Watch(context.WithoutCancel(ctx), PolicyKey, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("orchestrator: watch the live policy: %w", err)
	}
	s.watcher = w
	s.done.Add(1)
	go s.watch(w)
	// A change between the Get and the watch start is not lost: read again.
	if e, err := kv.Get(ctx, PolicyKey); err == nil {
		s.install(e)
	}
	return s, nil
}

func (s *PolicyStore) watch(w jetstream.KeyWatcher) {
	defer s.done.Done()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		s.install(e)
	}
}

// install switches to the policy in e if it is newer than the current one.
func (s *PolicyStore) install(e jetstream.KeyValueEntry) {
	if cur := s.cur.Load(); cur != nil && cur.revision >= e.Revision() {
		return
	}
	var doc PolicyDocument
	if err := json.Unmarshal(e.Value(), &doc); err != nil || doc.Spec != SpecPolicyDocument {
		s.log.Error("the stored policy is unreadable; keeping the policy in force", "revision", e.Revision(), "err", err)
		return
	}
	p, err := policy.Parse([]byte(doc.Source))
	if err != nil {
		s.log.Error("the stored policy does not compile; keeping the policy in force",
			"version", doc.Version, "revision", e.Revision(), "err", err)
		return
	}
	next := &livePolicy{p: p, doc: doc, revision: e.Revision()}
	for {
		cur := s.cur.Load()
		if cur != nil && cur.revision >= next.revision {
			return
		}
		if s.cur.CompareAndSwap(cur, next) {
			break
		}
	}
	s.mu.Lock()
	close(s.switched)
	s.switched = make(chan struct{})
	s.mu.Unlock()
	s.log.Info("policy switched", "version", doc.Version, "applied_by", doc.AppliedBy, "revision", e.Revision())
	if s.onChange != nil {
		s.onChange(doc)
	}
}

// Current is the policy in force.
func (s *PolicyStore) Current() *policy.Policy {
	if cur := s.cur.Load(); cur != nil {
		return cur.p
	}
	return s.fallback
}

// Live returns the stored document in force and its revision; ok is false
// while the fallback serves.
func (s *PolicyStore) Live() (doc PolicyDocument, revision uint64, ok bool) {
	cur := s.cur.Load()
	if cur == nil {
		return PolicyDocument{}, 0, false
	}
	return cur.doc, cur.revision, true
}

// WaitRevision returns once the store serves the policy stored at revision
// rev or a later one, or when ctx ends.
func (s *PolicyStore) WaitRevision(ctx context.Context, rev uint64) error {
	for {
		s.mu.Lock()
		ch := s.switched
		s.mu.Unlock()
		if cur := s.cur.Load(); cur != nil && cur.revision >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the watch.
func (s *PolicyStore) Close() error {
	err := s.watcher.Stop()
	s.done.Wait()
	return err
}

// ApplyResult says what ApplyPolicy did.
type ApplyResult struct {
	Document PolicyDocument
	Revision uint64
	// Changed is false when the same content was already live.
	Changed bool
}

// ApplyPolicy validates source and stores it as the fleet's live policy.
// Applying the live content again changes nothing; other content under a
// version applied before is refused with ErrPolicyVersionExists. A source
// that does not compile returns the parse error (a *policy.Errors) and
// stores nothing.
//
// The version's own key (PolicyVersionKey) is written before the live
// policy changes, so a request made under the new version can always be
// checked against it; the live version's key is written too when a policy
// stored by an earlier release has none yet.
func ApplyPolicy(ctx context.Context, js jetstream.JetStream, source []byte, by string, now time.Time) (ApplyResult, error) {
	p, err := policy.Parse(source)
	if err != nil {
		return ApplyResult{}, err
	}
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketPolicy, err)
	}
	sum := sha256.Sum256(source)
	doc := PolicyDocument{
		Spec: SpecPolicyDocument, Version: p.Version(), SHA256: hex.EncodeToString(sum[:]),
		Source: string(source), AppliedBy: by, AppliedAt: now.UTC(),
	}
	value, err := json.Marshal(doc)
	if err != nil {
		return ApplyResult{}, err
	}
	e, err := kv.Get(ctx, PolicyKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e = nil
	case err != nil:
		return ApplyResult{}, fmt.Errorf("orchestrator: read the live policy: %w", err)
	}
	var live PolicyDocument
	liveOK := false
	if e != nil {
		if live, err = decodePolicyDocument(e.Value()); err == nil {
			liveOK = true
			if live.SHA256 == doc.SHA256 {
				// Already live; make sure its version has its own key.
				if _, err := keepVersion(ctx, js, kv, live, e.Value()); err != nil {
					return ApplyResult{}, err
				}
				return ApplyResult{Document: live, Revision: e.Revision()}, nil
			}
			if live.Version == doc.Version {
				return ApplyResult{Document: live, Revision: e.Revision()}, ErrPolicyVersionExists
			}
		}
	}
	if stored, err := keepVersion(ctx, js, kv, doc, value); err != nil {
		return ApplyResult{}, err
	} else if stored.SHA256 != doc.SHA256 {
		return ApplyResult{Document: stored}, ErrPolicyVersionExists
	}
	if liveOK {
		// The version being replaced stays readable too.
		if _, err := keepVersion(ctx, js, kv, live, e.Value()); err != nil {
			return ApplyResult{}, err
		}
	}
	var rev uint64
	if e == nil {
		rev, err = kv.Create(ctx, PolicyKey, value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return ApplyResult{}, ErrPolicyConflict
		}
	} else {
		// A roll-up over the live revision: the bucket takes a second
		// message on a key only so (events.PolicyBucketConfig), and it
		// replaces whatever the key held, a policy or something the server
		// published there as the answer to someone's request.
		rev, err = events.UpdateKey(ctx, js, contracts.BucketPolicy, PolicyKey, value, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return ApplyResult{}, ErrPolicyConflict
		}
	}
	if err != nil {
		return ApplyResult{}, fmt.Errorf("orchestrator: store the policy: %w", err)
	}
	return ApplyResult{Document: doc, Revision: rev, Changed: true}, nil
}

// keepVersion stores doc (encoded as value) under its version's key unless
// that key holds an applied policy, and returns the document the key holds:
// doc, or the one applied before under the same version. A value there that
// is no policy of that version (something the server published on the key
// as the answer to someone's request before the version was applied) is
// replaced.
func keepVersion(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, doc PolicyDocument, value []byte) (PolicyDocument, error) {
	key := PolicyVersionKey(doc.Version)
	for range 3 {
		if _, err := kv.Create(ctx, key, value); err == nil {
			return doc, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return PolicyDocument{}, fmt.Errorf("orchestrator: store policy version %q: %w", doc.Version, err)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted in between: create again
		}
		if err != nil {
			return PolicyDocument{}, fmt.Errorf("orchestrator: read policy version %q: %w", doc.Version, err)
		}
		if stored, err := decodePolicyDocument(e.Value()); err == nil && stored.Version == doc.Version {
			return stored, nil
		}
		_, err = events.UpdateKey(ctx, js, contracts.BucketPolicy, key, value, e.Revision())
		switch {
		case err == nil:
			return doc, nil
		case !errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			return PolicyDocument{}, fmt.Errorf("orchestrator: store policy version %q: %w", doc.Version, err)
		}
	}
	return PolicyDocument{}, ErrPolicyConflict
}

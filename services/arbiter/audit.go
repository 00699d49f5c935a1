package arbiter

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events/auditlog"
)

// This file is the arbiter's side of the audit log (contracts/audit): every
// change it announces is appended to HITL_AUDIT in the same step, before the
// announcement, by group commit (concurrent
// appends share one synced write), and checkpoints are signed with the
// receipt key as they fall due.

// AuditConfig configures the audit log's checkpoints.
type AuditConfig struct {
	// CheckpointEvery is how many entries make a checkpoint due (default
	// 1000); CheckpointInterval how long an entry may wait to be signed
	// however few there are (default one minute).
	CheckpointEvery    int
	CheckpointInterval time.Duration
}

// auditTrail counts this arbiter's appends, and tells the checkpointer
// when it has appended enough for a checkpoint.
type auditTrail struct {
	appender *auditlog.Appender
	appended atomic.Int64
	due      chan struct{}
	// hashes are the record hashes computed lately, by event id and
	// revision: the operations of one group share a revision, and a
	// record is hashed once for all of them.
	mu     sync.Mutex
	hashes map[string]*recordHash
}

type recordHash struct {
	once sync.Once
	sum  string
	// data is the record as written, hashed on first use.
	data []byte
}

// maxRecordHashes bounds the hashes kept; past it they are forgotten.
const maxRecordHashes = 4096

func newAuditTrail(js jetstream.JetStream) *auditTrail {
	return &auditTrail{appender: auditlog.NewAppender(js), due: make(chan struct{}, 1), hashes: map[string]*recordHash{}}
}

// entry is the hash entry of eventID at rev, made with data when new.
func (t *auditTrail) entry(eventID string, rev uint64, data []byte) *recordHash {
	key := eventID + "@" + strconv.FormatUint(rev, 10)
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.hashes[key]
	if !ok {
		if len(t.hashes) >= maxRecordHashes {
			clear(t.hashes)
		}
		h = &recordHash{data: data}
		t.hashes[key] = h
	}
	return h
}

// written notes the record of eventID written at rev, as stored: its
// hash is taken from these bytes, the record's RFC 8785 form as the bucket
// holds it, when an entry first asks for it.
func (t *auditTrail) written(eventID string, rev uint64, data []byte) {
	t.entry(eventID, rev, data)
}

// hash is the record hash of eventID at rev: from the bytes written, else
// computed by sum, once.
func (t *auditTrail) hash(eventID string, rev uint64, sum func() string) string {
	h := t.entry(eventID, rev, nil)
	h.once.Do(func() {
		if h.data != nil {
			h.sum, _ = audit.RecordSHA256(h.data)
			h.data = nil
		}
		if h.sum == "" {
			h.sum = sum()
		}
	})
	return h.sum
}

// sumRecord is the record hash of rec.
func sumRecord(rec *contracts.Record) string {
	data, err := contracts.Marshal(rec)
	if err != nil {
		return ""
	}
	sum, _ := audit.RecordSHA256(data)
	return sum
}

// runCheckpoints signs checkpoints until ctx ends; without a receipt key
// entries are appended and chained but not signed.
func (a *Arbiter) runCheckpoints(ctx context.Context) error {
	if a.cfg.Receipts == nil {
		<-ctx.Done()
		return nil
	}
	return auditlog.RunCheckpoints(ctx, auditlog.CheckpointConfig{
		JS: a.cfg.JS, Signer: a.cfg.Receipts, Every: a.cfg.Audit.CheckpointEvery,
		Interval: a.cfg.Audit.CheckpointInterval, Logger: a.cfg.Logger,
	}, a.audit.due)
}

// appendAudit appends e, de-duplicated by msgID, and tells the
// checkpointer when a checkpoint's worth has been appended.
func (a *Arbiter) appendAudit(ctx context.Context, e *audit.Entry, msgID string) error {
	if err := a.audit.appender.Append(ctx, e, "audit:"+msgID); err != nil {
		return err
	}
	every := int64(a.cfg.Audit.CheckpointEvery)
	if every <= 0 {
		every = 1000
	}
	if a.audit.appended.Add(1)%every == 0 {
		select {
		case a.audit.due <- struct{}{}:
		default:
		}
	}
	return nil
}

// auditChange appends the change ch announces, at the record's revision
// rev (0 when none was written), under the announcement's msgID.
func (a *Arbiter) auditChange(ctx context.Context, eventID string, ch *contracts.Changed, rev uint64, msgID string) error {
	e := audit.Entry{
		Change: ch.Change, EventID: eventID, Tenant: a.tenantOf(ctx, eventID), Revision: rev,
		Status: ch.Status, By: ch.By, VoteID: ch.VoteID, Reason: ch.Reason, Step: ch.Step, At: ch.At,
	}
	if ch.Approver != nil {
		e.By, e.Via = ch.Approver.ID, ch.Approver.Via
	}
	if rev != 0 {
		e.RecordSHA256 = a.recordSHA256(ctx, eventID, rev)
	}
	return a.appendAudit(ctx, &e, msgID)
}

// auditRecord appends change (created, decided) of rec at revision rev.
func (a *Arbiter) auditRecord(ctx context.Context, change string, rec *contracts.Record, rev uint64) error {
	e := audit.Entry{
		Change: change, EventID: rec.Request.EventID, Tenant: rec.Request.Run.Tenant, Revision: rev,
		Status: rec.Status, By: rec.Request.Run.Agent, At: rec.Request.CreatedAt,
	}
	if change == audit.ChangeDecided && rec.Outcome != nil {
		// Not the outcome's reason: a rejection's reason is the approver's
		// own words, which stay in the record.
		e.By, e.At = strings.Join(rec.Outcome.DecidedBy, ","), rec.Outcome.DecidedAt
	}
	e.RecordSHA256 = a.audit.hash(e.EventID, rev, func() string { return sumRecord(rec) })
	return a.appendAudit(ctx, &e, change+":"+rec.Request.EventID)
}

// auditGrant appends a grant's issue or revocation.
func (a *Arbiter) auditGrant(ctx context.Context, change string, g *contracts.Grant, eventID string, by []string, at time.Time) error {
	e := audit.Entry{Change: change, EventID: eventID, GrantID: g.GrantID, Tenant: g.Tenant, By: strings.Join(by, ","), At: at}
	return a.appendAudit(ctx, &e, change+":"+g.GrantID)
}

// recordSHA256 is the hash of the record of eventID at revision rev: the
// one this arbiter wrote last when it is that revision, else the bucket's
// when it still holds that revision; "" when neither does (a later change
// replaced it: its own entry carries the newer hash).
func (a *Arbiter) recordSHA256(ctx context.Context, eventID string, rev uint64) string {
	return a.audit.hash(eventID, rev, func() string {
		if rec, at, ok := a.records.get(eventID); ok && at == rev {
			return sumRecord(&rec)
		}
		entry, err := a.kv.Get(ctx, eventID)
		if err != nil || entry.Revision() != rev {
			return ""
		}
		sum, _ := audit.RecordSHA256(entry.Value())
		return sum
	})
}

// tenantOf is the tenant of eventID's request: from the record this
// arbiter holds, else the bucket's; "" when neither has it.
func (a *Arbiter) tenantOf(ctx context.Context, eventID string) string {
	if rec, _, ok := a.records.get(eventID); ok {
		return rec.Request.Run.Tenant
	}
	entry, err := a.kv.Get(ctx, eventID)
	if err != nil {
		return ""
	}
	var rec struct {
		Request struct {
			Run struct {
				Tenant string `json:"tenant"`
			} `json:"run"`
		} `json:"request"`
	}
	if json.Unmarshal(entry.Value(), &rec) != nil {
		return ""
	}
	return rec.Request.Run.Tenant
}

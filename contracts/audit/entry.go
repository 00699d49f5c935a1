package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
)

// The audit log's stream and subjects.
const (
	// Stream holds the entries and checkpoints, in one order.
	Stream = "HITL_AUDIT"
	// SubjectPrefix is every subject of Stream.
	SubjectPrefix = "hitl.audit."
	// SubjectEntryPrefix starts the subject of an entry stored alone (as
	// Append stores it); the approval's event id, or the grant's id for
	// grant entries, ends it.
	SubjectEntryPrefix = "hitl.audit.entry."
	// SubjectCheckpoint is where signed checkpoints are stored.
	SubjectCheckpoint = "hitl.audit.checkpoint"
	// SubjectBatch holds batches: the entries appended together in one
	// stored message (Batch), one or more; the arbiter writes every entry
	// in a batch.
	SubjectBatch = "hitl.audit.batch"
)

// Specs of the log's documents.
const (
	SpecEntry      = "countersign.audit.entry/v1"
	SpecCheckpoint = "countersign.audit.checkpoint/v1"
	SpecBatch      = "countersign.audit.batch/v1"
	// BundleFormat is the format of an export bundle (its first line).
	BundleFormat = "countersign.audit.bundle/v1"
)

// Change kinds beside those of contracts.Changed (vote_counted, claimed,
// outcome, ...), which entries carry as they are: any change kind is an
// entry's kind.
const (
	ChangeCreated      = contracts.ChangeCreated
	ChangeDecided      = contracts.ChangeDecided
	ChangeGrantIssued  = "grant_issued"
	ChangeGrantRevoked = "grant_revoked"
	ChangeGrantUsed    = "grant_used"
	// ChangeGrantUseRefused is a grant use logged as a failure: one that
	// names a grant that does not exist (contracts.ReasonUnknownGrant) or
	// a call the grant could not allow (ReasonGrantUseMismatch). Gates
	// record only uses their grant covers: such a use is a forgery.
	ChangeGrantUseRefused = "grant_use_refused"
	ChangeGrantRefused    = "grant_revoke_refused"
	ChangeRequestRefused  = "request_refused"
)

// ReasonGrantUseMismatch refuses a grant use for another agent, tool or
// run than its grant's.
const ReasonGrantUseMismatch = "grant_use_mismatch"

// Entry is one change in the audit log. It names what changed, who did it
// and the record's state after it (revision and hash), never the record's
// contents: no arguments, comments, answers or summaries.
type Entry struct {
	Spec string `json:"spec"`
	// Change is the kind of change: created, vote_counted, decided, ...
	Change string `json:"change"`
	// EventID is the approval's id; GrantID the grant's, for grant entries.
	EventID string `json:"event_id,omitempty"`
	GrantID string `json:"grant_id,omitempty"`
	// Tenant is the approval's or grant's tenant (run.tenant), "" for
	// none: what scopes a tenant-limited reader and a sink to its tenants.
	Tenant string `json:"tenant,omitempty"`
	// Revision is the record's KV revision after the change (0 when the
	// change wrote none), RecordSHA256 the hex SHA-256 of the record's
	// RFC 8785 form at that revision.
	Revision     uint64 `json:"revision,omitempty"`
	RecordSHA256 string `json:"record_sha256,omitempty"`
	// Status is the record's status after the change.
	Status string `json:"status,omitempty"`
	// By is who made the change: an approver, a command's issuer, an agent.
	By     string `json:"by,omitempty"`
	Via    string `json:"via,omitempty"`
	VoteID string `json:"vote_id,omitempty"`
	// RunID and ToolCallID name the call a grant allowed (grant_used).
	RunID      string `json:"run_id,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Reason is a refusal's reason code.
	Reason string `json:"reason,omitempty"`
	Step   int    `json:"step,omitempty"`
	// At is when the arbiter made the change.
	At time.Time `json:"at"`
}

// ID is the entry's approval or grant id.
func (e *Entry) ID() string {
	if e.EventID != "" {
		return e.EventID
	}
	return e.GrantID
}

// Subject is where e is appended.
func (e *Entry) Subject() string { return SubjectEntryPrefix + e.ID() }

// Encode returns e's RFC 8785 form: what is stored and hashed.
func (e *Entry) Encode() ([]byte, error) {
	if e.Spec == "" {
		e.Spec = SpecEntry
	}
	if e.Change == "" || e.ID() == "" {
		return nil, errors.New("audit: an entry needs a change and an id")
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return contracts.Canonicalize(raw)
}

// LeafHash is the SHA-256 of an entry's RFC 8785 form, from any JSON
// encoding of it.
func LeafHash(raw []byte) ([32]byte, error) {
	c, err := contracts.Canonicalize(raw)
	if err != nil {
		return [32]byte{}, fmt.Errorf("audit: entry is not canonical JSON: %w", err)
	}
	return sha256.Sum256(c), nil
}

// Hash is a chain or leaf hash.
type Hash = [32]byte

// Genesis is the chain hash before the first entry.
var Genesis Hash

// Next is the chain hash after the entry with leaf hash leaf stored at
// stream sequence seq, following prev.
func Next(prev, leaf Hash, seq uint64) Hash {
	var b [32 + 32 + 8]byte
	copy(b[:32], prev[:])
	copy(b[32:64], leaf[:])
	binary.BigEndian.PutUint64(b[64:], seq)
	return sha256.Sum256(b[:])
}

// Hex is h in lowercase hex.
func Hex(h Hash) string { return hex.EncodeToString(h[:]) }

// ParseHex reads a hash written by Hex.
func ParseHex(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("audit: %q is not a hex SHA-256", contracts.TruncateText(s, 80))
	}
	copy(h[:], b)
	return h, nil
}

// RecordSHA256 is the hex SHA-256 of a record's RFC 8785 form, from any
// JSON encoding of it (the KV value, the API's answer).
func RecordSHA256(record []byte) (string, error) {
	c, err := contracts.Canonicalize(record)
	if err != nil {
		return "", err
	}
	return contracts.CanonicalSHA256(c), nil
}

// Pos is an entry's place in the log: the stream sequence of the message
// that holds it and, for an entry of a batch, its 1-based index in the
// batch (0 for a message that is one entry).
type Pos struct {
	Seq   uint64
	Index int
}

// Before reports whether p comes before q in the log.
func (p Pos) Before(q Pos) bool {
	return p.Seq < q.Seq || p.Seq == q.Seq && p.Index < q.Index
}

// String is "seq" for an entry stored alone, "seq.index" for one of a batch.
func (p Pos) String() string {
	if p.Index == 0 {
		return strconv.FormatUint(p.Seq, 10)
	}
	return strconv.FormatUint(p.Seq, 10) + "." + strconv.Itoa(p.Index)
}

// NextAt is the chain hash after the entry with leaf hash leaf at p,
// following prev: Next for an entry stored alone; for an entry of a batch
// the index is chained too, so no entry can move within its batch.
func NextAt(prev, leaf Hash, p Pos) Hash {
	if p.Index == 0 {
		return Next(prev, leaf, p.Seq)
	}
	var b [32 + 32 + 8 + 4]byte
	copy(b[:32], prev[:])
	copy(b[32:64], leaf[:])
	binary.BigEndian.PutUint64(b[64:72], p.Seq)
	binary.BigEndian.PutUint32(b[72:], uint32(p.Index))
	return sha256.Sum256(b[:])
}

// Batch is a stored message that holds several entries, each in its RFC
// 8785 form; each is hashed and chained on its own (NextAt).
type Batch struct {
	Spec    string            `json:"spec"`
	Entries []json.RawMessage `json:"entries"`
}

// MaxBatch bounds the entries of a batch, far below a checkpoint's
// MaxLeaves, so that a checkpoint always holds whole messages.
const MaxBatch = 256

// EncodeBatch returns the stored form of a batch of entries, each already
// in its RFC 8785 form (Entry.Encode).
func EncodeBatch(entries [][]byte) []byte {
	n := 64
	for _, e := range entries {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"entries":[`...)
	for i, e := range entries {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, `],"spec":"`+SpecBatch+`"}`...)
}

// Entries returns the entries a stored message holds, in order, and the
// index of the first (0 for a message that is one entry, else 1): the
// message itself for an entry subject, a batch's entries for SubjectBatch,
// and none for any other subject (checkpoints). A batch that does not
// decode is an error.
func Entries(subject string, data []byte) ([]json.RawMessage, int, error) {
	switch {
	case strings.HasPrefix(subject, SubjectEntryPrefix):
		return []json.RawMessage{data}, 0, nil
	case subject == SubjectBatch:
		var b Batch
		if err := json.Unmarshal(data, &b); err != nil || b.Spec != SpecBatch || len(b.Entries) == 0 {
			return nil, 0, fmt.Errorf("audit: a batch that does not decode (spec %q, %d entries, err %v)", b.Spec, len(b.Entries), err)
		}
		return b.Entries, 1, nil
	}
	return nil, 0, nil
}

// IDOf is the approval or grant id an entry names, "" when it names none
// or does not decode.
func IDOf(raw []byte) string {
	var ids struct {
		EventID string `json:"event_id"`
		GrantID string `json:"grant_id"`
	}
	_ = json.Unmarshal(raw, &ids)
	if ids.EventID != "" {
		return ids.EventID
	}
	return ids.GrantID
}

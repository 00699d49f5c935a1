package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// The audit log's stream and subjects.
const (
	// Stream holds the entries and checkpoints, in one order.
	Stream = "HITL_AUDIT"
	// SubjectPrefix is every subject of Stream.
	SubjectPrefix = "hitl.audit."
	// SubjectEntryPrefix starts an entry's subject; the approval's event
	// id, or the grant's id for grant entries, ends it.
	SubjectEntryPrefix = "hitl.audit.entry."
	// SubjectCheckpoint is where signed checkpoints are stored.
	SubjectCheckpoint = "hitl.audit.checkpoint"
)

// Specs of the log's documents.
const (
	SpecEntry      = "countersign.audit.entry/v1"
	SpecCheckpoint = "countersign.audit.checkpoint/v1"
	// BundleFormat is the format of an export bundle (its first line).
	BundleFormat = "countersign.audit.bundle/v1"
)

// Change kinds beside those of contracts.Changed (vote_counted, claimed,
// outcome, ...), which entries carry as they are: any change kind is an
// entry's kind.
const (
	ChangeCreated        = contracts.ChangeCreated
	ChangeDecided        = contracts.ChangeDecided
	ChangeGrantIssued    = "grant_issued"
	ChangeGrantRevoked   = "grant_revoked"
	ChangeGrantUsed      = "grant_used"
	ChangeGrantRefused   = "grant_revoke_refused"
	ChangeRequestRefused = "request_refused"
)

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

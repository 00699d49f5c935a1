package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts/receipt"
)

// Checkpoint is the signed statement of a stretch of the log: the entries
// it covers, in stream order, and the chain hash before and after them.
// Each checkpoint starts where the one before it ended (PrevHead is that
// one's Head), so a verifier holding any two checks everything between.
type Checkpoint struct {
	Spec   string `json:"spec"`
	Issuer string `json:"iss"`
	Stream string `json:"stream"`
	// PrevHead is the chain hash before the first leaf; Head after the
	// last (hex).
	PrevHead string `json:"prev_head"`
	Head     string `json:"head"`
	// Leaves are the entries covered, in stream order.
	Leaves []Leaf `json:"leaves"`
	// IssuedAt is when the checkpoint was signed.
	IssuedAt time.Time `json:"issued_at"`
}

// Leaf is one entry as a checkpoint covers it.
type Leaf struct {
	Seq uint64 `json:"seq"`
	// Index is the entry's 1-based place in its batch (0: stored alone).
	Index int `json:"index,omitempty"`
	// ID is the entry's approval or grant id, so that a removed entry is
	// named by more than its place.
	ID string `json:"id"`
	// SHA256 is the entry's LeafHash (hex).
	SHA256 string `json:"sha256"`
}

// MaxLeaves bounds a checkpoint's leaves: about 140 bytes each, so a
// checkpoint stays far below the server's max payload.
const MaxLeaves = 2000

// Pos is the leaf's place in the log.
func (l Leaf) Pos() Pos { return Pos{Seq: l.Seq, Index: l.Index} }

// First is the place of the checkpoint's first entry.
func (c *Checkpoint) First() Pos { return c.Leaves[0].Pos() }

// Last is the place of the checkpoint's last entry.
func (c *Checkpoint) Last() Pos { return c.Leaves[len(c.Leaves)-1].Pos() }

// Span is "entries A–B" for messages.
func (c *Checkpoint) Span() string {
	if len(c.Leaves) == 0 {
		return "no entries"
	}
	return fmt.Sprintf("entries %s–%s", c.First(), c.Last())
}

// Check reports whether c holds together: leaves in increasing order, each
// hash well formed, and the chain from PrevHead over them ending at Head.
func (c *Checkpoint) Check() error {
	if c.Spec != SpecCheckpoint {
		return fmt.Errorf("spec %q, want %s", c.Spec, SpecCheckpoint)
	}
	if len(c.Leaves) == 0 || len(c.Leaves) > MaxLeaves {
		return fmt.Errorf("%d leaves, want 1 to %d", len(c.Leaves), MaxLeaves)
	}
	head, err := ParseHex(c.PrevHead)
	if err != nil {
		return err
	}
	var last Pos
	for _, l := range c.Leaves {
		if !last.Before(l.Pos()) || l.Index < 0 {
			return fmt.Errorf("leaf %s does not come after %s", l.Pos(), last)
		}
		last = l.Pos()
		leaf, err := ParseHex(l.SHA256)
		if err != nil {
			return err
		}
		head = NextAt(head, leaf, l.Pos())
	}
	if Hex(head) != c.Head {
		return errors.New("its head is not the chain over its leaves")
	}
	return nil
}

// Signer signs checkpoints: *receipt.Signer.
type Signer interface {
	SignCheckpoint(payload []byte) (string, error)
	Issuer() string
}

// Sign fills in Spec and Issuer and signs c.
func Sign(s Signer, c Checkpoint) (string, error) {
	c.Spec, c.Issuer = SpecCheckpoint, s.Issuer()
	if c.Stream == "" {
		c.Stream = Stream
	}
	if err := c.Check(); err != nil {
		return "", fmt.Errorf("audit: checkpoint: %w", err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return s.SignCheckpoint(payload)
}

// Errors of ParseCheckpoint, for errors.Is.
var (
	ErrUnknownKey   = errors.New("signed by a key that is not among the keys")
	ErrBadSignature = errors.New("its signature does not verify")
	ErrMalformed    = errors.New("malformed checkpoint")
)

// ParseCheckpoint checks a checkpoint token's header (EdDSA, type
// receipt.CheckpointType) and signature against keys, and that the
// checkpoint holds together (Check). It returns the checkpoint and the
// id of the key that signed it.
func ParseCheckpoint(ctx context.Context, token string, keys receipt.KeySource) (*Checkpoint, string, error) {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return nil, "", fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	var h struct {
		Alg  string   `json:"alg"`
		Typ  string   `json:"typ"`
		Kid  string   `json:"kid"`
		Crit []string `json:"crit"`
	}
	if err := decodePart(parts[0], &h); err != nil {
		return nil, "", err
	}
	if h.Alg != receipt.Algorithm || h.Typ != receipt.CheckpointType || h.Kid == "" || len(h.Crit) > 0 {
		return nil, h.Kid, fmt.Errorf("%w: header alg %q typ %q, want %s %s with a kid", ErrMalformed, h.Alg, h.Typ, receipt.Algorithm, receipt.CheckpointType)
	}
	pub, err := keys.Key(ctx, h.Kid)
	if err != nil {
		return nil, h.Kid, fmt.Errorf("%w: key %q", ErrUnknownKey, h.Kid)
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return nil, h.Kid, fmt.Errorf("%w with key %q", ErrBadSignature, h.Kid)
	}
	var c Checkpoint
	if err := decodePart(parts[1], &c); err != nil {
		return nil, h.Kid, err
	}
	if err := c.Check(); err != nil {
		return nil, h.Kid, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &c, h.Kid, nil
}

// PayloadOf decodes a checkpoint token's payload without checking its
// signature: for the writer, which reads back what it stored.
func PayloadOf(token string) (*Checkpoint, error) {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	var c Checkpoint
	if err := decodePart(parts[1], &c); err != nil {
		return nil, err
	}
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &c, nil
}

func decodePart(s string, v any) error {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// NewCheckpoint starts a checkpoint after chain hash prev.
func NewCheckpoint(prev Hash, at time.Time) *Checkpoint {
	return &Checkpoint{Stream: Stream, PrevHead: Hex(prev), Head: Hex(prev), IssuedAt: at.UTC()}
}

// Append adds the entry at p, after the leaves already there.
func (c *Checkpoint) Append(p Pos, entry []byte) error {
	if len(c.Leaves) > 0 && !c.Last().Before(p) {
		return fmt.Errorf("audit: entry %s does not come after %s", p, c.Last())
	}
	leaf, err := LeafHash(entry)
	if err != nil {
		return err
	}
	head, err := ParseHex(c.Head)
	if err != nil {
		return err
	}
	c.Leaves = append(c.Leaves, Leaf{Seq: p.Seq, Index: p.Index, ID: IDOf(entry), SHA256: Hex(leaf)})
	c.Head = Hex(NextAt(head, leaf, p))
	return nil
}

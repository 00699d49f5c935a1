package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/countersign/countersign/contracts/receipt"
)

// Kinds of Problem.
const (
	ProblemAltered    = "altered"
	ProblemRemoved    = "removed"
	ProblemReordered  = "reordered"
	ProblemInserted   = "inserted"
	ProblemDuplicate  = "duplicate"
	ProblemCheckpoint = "checkpoint"
	ProblemMalformed  = "malformed"
	ProblemTruncated  = "truncated"
)

// Problem is one thing wrong with a bundle. Seq and ID name the entry (0
// and "" for a checkpoint's problem).
type Problem struct {
	Kind    string `json:"kind"`
	Seq     uint64 `json:"seq,omitempty"`
	Index   int    `json:"index,omitempty"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message"`
}

// Report is what Verify found.
type Report struct {
	Entries int `json:"entries"`
	// Checkpoints counts those that verify; Signed the entries they cover.
	Checkpoints int `json:"checkpoints"`
	Signed      int `json:"signed"`
	// Unsigned counts the entries after the last checkpoint: appended
	// since, not signed yet.
	Unsigned int `json:"unsigned"`
	// Head is the last verified checkpoint's chain hash, and HeadSeq the
	// entry it ends at: publish it elsewhere to pin this history.
	Head      string `json:"head,omitempty"`
	HeadSeq   uint64 `json:"head_seq,omitempty"`
	HeadIndex int    `json:"head_index,omitempty"`
	// KeyIDs are the keys that signed the checkpoints that verify.
	KeyIDs   []string  `json:"key_ids,omitempty"`
	Problems []Problem `json:"problems"`
}

// OK reports whether the bundle verified without a problem.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// bundleEntry is an entry line as read.
type bundleEntry struct {
	Line
	id     string
	leaf   Hash
	leafOK bool
}

func (e *bundleEntry) pos() Pos { return Pos{Seq: e.Seq, Index: e.Index} }

// ReadBundle reads a bundle's header and lines.
func ReadBundle(r io.Reader) (*Header, []Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var h Header
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, errors.New("audit: empty bundle")
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Format != BundleFormat {
		return nil, nil, fmt.Errorf("audit: not a bundle of format %s", BundleFormat)
	}
	var lines []Line
	for n := 2; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, nil, fmt.Errorf("audit: bundle line %d: %w", n, err)
		}
		lines = append(lines, l)
	}
	return &h, lines, sc.Err()
}

// HeaderKeys are the keys a bundle carries.
func HeaderKeys(h *Header) (*receipt.KeySet, error) {
	raw, err := json.Marshal(h.Keys)
	if err != nil {
		return nil, err
	}
	return receipt.ParseJWKS(raw)
}

// Verify checks a bundle: every checkpoint's signature against keys (the
// bundle's own keys when nil) and chain, that checkpoints follow one
// another, and that every entry is the one its checkpoint signed at its
// place. It reports each entry altered, removed, reordered or inserted by
// sequence and id. The error is for a bundle that cannot be read at all.
func Verify(ctx context.Context, r io.Reader, keys receipt.KeySource) (*Header, *Report, error) {
	h, lines, err := ReadBundle(r)
	if err != nil {
		return nil, nil, err
	}
	if keys == nil {
		ks, err := HeaderKeys(h)
		if err != nil {
			return h, nil, fmt.Errorf("audit: the bundle's keys: %w", err)
		}
		keys = ks
	}
	v := &verifier{rep: &Report{Problems: []Problem{}}, byPos: map[Pos]*bundleEntry{}}
	v.entries(lines)
	v.checkpoints(ctx, lines, keys)
	v.uncovered()
	v.end(lines)
	return h, v.rep, nil
}

// end checks the end line: a bundle without one was cut short.
func (v *verifier) end(lines []Line) {
	n := len(lines)
	if n == 0 || lines[n-1].End == nil {
		v.problem(ProblemTruncated, Pos{}, "", "the bundle has no end line: it was cut short, and entries or checkpoints after its last line are missing")
		return
	}
	end, cps := lines[n-1].End, 0
	for _, l := range lines {
		if l.Checkpoint != "" {
			cps++
		}
	}
	if end.Entries != v.rep.Entries || end.Checkpoints != cps {
		v.problem(ProblemTruncated, Pos{}, "", "the bundle holds %d entries and %d checkpoints; its end line says %d and %d were written",
			v.rep.Entries, cps, end.Entries, end.Checkpoints)
	}
}

type verifier struct {
	rep     *Report
	order   []*bundleEntry
	byPos   map[Pos]*bundleEntry
	covered map[Pos]bool
	// lastSigned is the last entry a verified checkpoint covers; head its
	// chain hash.
	lastSigned Pos
	head       Hash
	signed     bool
}

func (v *verifier) problem(kind string, at Pos, id, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if at.Seq != 0 {
		msg = fmt.Sprintf("entry %s (%s) %s: %s", at, orNone(id), kind, msg)
	}
	v.rep.Problems = append(v.rep.Problems, Problem{Kind: kind, Seq: at.Seq, Index: at.Index, ID: id, Message: msg})
}

func orNone(id string) string {
	if id == "" {
		return "no id"
	}
	return id
}

// entries reads the entry lines and checks their order.
func (v *verifier) entries(lines []Line) {
	var prev *bundleEntry
	for _, l := range lines {
		if l.Checkpoint != "" || l.End != nil {
			continue
		}
		e := &bundleEntry{Line: l, id: IDOf(l.Entry)}
		e.leaf, e.leafOK = leafOf(l.Entry)
		v.rep.Entries++
		if l.Seq == 0 || l.Index < 0 {
			v.problem(ProblemMalformed, Pos{}, e.id, "an entry line of %s has no sequence", orNone(e.id))
			continue
		}
		at := e.pos()
		if _, dup := v.byPos[at]; dup {
			v.problem(ProblemDuplicate, at, e.id, "the bundle holds it twice")
			continue
		}
		if prev != nil && at.Before(prev.pos()) {
			v.problem(ProblemReordered, at, e.id, "it comes after entry %s (%s); the log's order is by sequence", prev.pos(), orNone(prev.id))
		}
		v.byPos[at] = e
		v.order = append(v.order, e)
		prev = e
	}
}

func leafOf(raw json.RawMessage) (Hash, bool) {
	if len(raw) == 0 {
		return Hash{}, false
	}
	h, err := LeafHash(raw)
	return h, err == nil
}

// checkpoints verifies each checkpoint and the entries it covers.
func (v *verifier) checkpoints(ctx context.Context, lines []Line, keys receipt.KeySource) {
	v.covered = map[Pos]bool{}
	var prev *Checkpoint
	for _, l := range lines {
		if l.Checkpoint == "" {
			continue
		}
		c, kid, err := ParseCheckpoint(ctx, l.Checkpoint, keys)
		if err != nil {
			span := "a checkpoint"
			if p, perr := PayloadOf(l.Checkpoint); perr == nil {
				span = "the checkpoint of " + p.Span()
			}
			v.problem(ProblemCheckpoint, Pos{}, "", "%s does not verify: %v", span, err)
			continue
		}
		if prev != nil && (c.PrevHead != prev.Head || !prev.Last().Before(c.First())) {
			v.problem(ProblemCheckpoint, Pos{}, "", "the checkpoint of %s does not continue the one of %s: a checkpoint between them is missing, or they are out of order",
				c.Span(), prev.Span())
		}
		v.rep.Checkpoints++
		if !slices.Contains(v.rep.KeyIDs, kid) {
			v.rep.KeyIDs = append(v.rep.KeyIDs, kid)
		}
		v.leaves(c)
		if v.lastSigned.Before(c.Last()) {
			v.lastSigned, v.head, v.signed = c.Last(), mustHex(c.Head), true
			v.rep.Head, v.rep.HeadSeq, v.rep.HeadIndex = c.Head, c.Last().Seq, c.Last().Index
		}
		prev = c
	}
}

func mustHex(s string) Hash {
	h, _ := ParseHex(s) // checked by Checkpoint.Check
	return h
}

// leaves checks the entries c signed against the bundle's.
func (v *verifier) leaves(c *Checkpoint) {
	signedAt := map[string]Leaf{}
	for _, l := range c.Leaves {
		signedAt[l.SHA256] = l
	}
	for _, l := range c.Leaves {
		v.covered[l.Pos()] = true
		e, ok := v.byPos[l.Pos()]
		switch {
		case !ok:
			v.problem(ProblemRemoved, l.Pos(), l.ID, "the checkpoint of %s signed it; the bundle does not hold it", c.Span())
		case e.leafOK && Hex(e.leaf) == l.SHA256:
			v.rep.Signed++
		case e.leafOK && signedAt[Hex(e.leaf)].Seq != 0:
			at := signedAt[Hex(e.leaf)]
			v.problem(ProblemReordered, l.Pos(), l.ID, "it holds the entry signed at %s (%s)", at.Pos(), orNone(at.ID))
		default:
			v.problem(ProblemAltered, l.Pos(), l.ID, "its content is not what the checkpoint of %s signed", c.Span())
		}
	}
}

// uncovered judges the entries no verified checkpoint covers: after the
// last one they are the log's newest, not signed yet, and must follow its
// chain; before it they were added or lost their checkpoint.
func (v *verifier) uncovered() {
	head, known := v.head, v.signed
	for _, e := range v.order {
		at := e.pos()
		if v.covered[at] {
			continue
		}
		if v.signed && at.Before(v.lastSigned) {
			v.problem(ProblemInserted, at, e.id, "no checkpoint that verifies lists it")
			continue
		}
		v.rep.Unsigned++
		if !e.leafOK {
			v.problem(ProblemMalformed, at, e.id, "it is not canonical JSON")
			known = false
			continue
		}
		next := NextAt(head, e.leaf, at)
		if known && Hex(next) != e.Chain {
			v.problem(ProblemAltered, at, e.id, "it does not follow the chain (not signed yet, so only the chain speaks for it)")
		}
		// Without a signed start, the exporter's chain hash is the start.
		if !known {
			if h, err := ParseHex(e.Chain); err == nil {
				next, known = h, true
			}
		}
		head = next
	}
}

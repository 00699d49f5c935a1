package audit

import (
	"bufio"
	"encoding/json"
	"io"
	"time"

	"github.com/countersign/countersign/contracts/receipt"
)

// A bundle is JSON Lines: a Header, then the log's lines in stream order,
// each checkpoint after the entries it covers. It is self-contained: a
// verifier needs nothing else, though it should check signatures against
// the keys the server publishes rather than the bundle's own copy.

// Header is a bundle's first line.
type Header struct {
	Format     string    `json:"format"`
	ExportedAt time.Time `json:"exported_at"`
	// Since and Until are the time range asked for; the bundle holds
	// every checkpoint whose entries meet it, whole, so it may hold
	// entries beyond it.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Keys are the server's receipt keys at export (its JWKS).
	Keys receipt.JWKS `json:"keys"`
}

// Line is an entry line (Seq, Chain, Entry) or a checkpoint line.
type Line struct {
	Seq uint64 `json:"seq,omitempty"`
	// Index is the entry's 1-based place in its batch (0: stored alone).
	Index int `json:"index,omitempty"`
	// Chain is the chain hash after the entry, as the exporter computed it.
	Chain string          `json:"chain,omitempty"`
	Entry json.RawMessage `json:"entry,omitempty"`
	// Checkpoint is a signed checkpoint token.
	Checkpoint string `json:"checkpoint,omitempty"`
	// End is the last line: what the exporter wrote. A bundle without it
	// was cut short.
	End *End `json:"end,omitempty"`
}

// End closes a bundle.
type End struct {
	Entries     int `json:"entries"`
	Checkpoints int `json:"checkpoints"`
}

// Writer writes a bundle.
type Writer struct {
	w   *bufio.Writer
	enc *json.Encoder
	end End
}

// NewWriter writes h (its Format set) and returns a Writer for the lines.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	h.Format = BundleFormat
	if h.Keys.Keys == nil {
		h.Keys.Keys = []receipt.JWK{}
	}
	if err := enc.Encode(h); err != nil {
		return nil, err
	}
	return &Writer{w: bw, enc: enc}, nil
}

// Entry writes the line of the entry at p.
func (w *Writer) Entry(p Pos, chain string, entry []byte) error {
	w.end.Entries++
	return w.enc.Encode(Line{Seq: p.Seq, Index: p.Index, Chain: chain, Entry: entry})
}

// Checkpoint writes a checkpoint line.
func (w *Writer) Checkpoint(token string) error {
	w.end.Checkpoints++
	return w.enc.Encode(Line{Checkpoint: token})
}

// Flush writes what is buffered.
func (w *Writer) Flush() error { return w.w.Flush() }

// Close writes the end line and flushes.
func (w *Writer) Close() error {
	end := w.end
	if err := w.enc.Encode(Line{End: &end}); err != nil {
		return err
	}
	return w.w.Flush()
}

// Exporter turns the stream's messages, read in order, into a bundle: it
// holds entries until the checkpoint that covers them arrives, then writes
// them and it when any of them falls in the range, and the entries no
// checkpoint covers yet at the end.
type Exporter struct {
	w            *Writer
	since, until time.Time
	// firstSeq is the stream's first sequence: a checkpoint covering
	// entries before it lost them to retention, and is left out.
	firstSeq uint64
	pending  []held
	head     Hash
	known    bool // whether head is the chain before pending[0]
}

type held struct {
	pos  Pos
	data []byte
	at   time.Time
}

// NewExporter returns an Exporter writing to w the entries of [since,
// until] (a zero time leaves that end open) from a stream whose first
// sequence is firstSeq.
func NewExporter(w *Writer, since, until time.Time, firstSeq uint64) *Exporter {
	return &Exporter{w: w, since: since, until: until, firstSeq: firstSeq, known: firstSeq <= 1}
}

// Entry takes the entry at p.
func (x *Exporter) Entry(p Pos, data []byte) {
	var e struct {
		At time.Time `json:"at"`
	}
	_ = json.Unmarshal(data, &e) // an unreadable entry is written as it is, for the verifier to judge
	x.pending = append(x.pending, held{pos: p, data: data, at: e.At})
}

// Checkpoint takes a stored checkpoint token.
func (x *Exporter) Checkpoint(token string) error {
	c, err := PayloadOf(token)
	if err != nil {
		// Not a checkpoint (only the arbiter may publish on its subject,
		// but the server publishes there its answers to whoever names it as
		// a reply): written as it is, for the verifier to judge; the
		// entries go on to the next checkpoint.
		return x.w.Checkpoint(token)
	}
	n := 0
	for n < len(x.pending) && !c.Last().Before(x.pending[n].pos) {
		n++
	}
	window := x.pending[:n]
	x.pending = x.pending[n:]
	head, _ := ParseHex(c.Head)
	defer func() { x.head, x.known = head, true }()
	if c.First().Seq < x.firstSeq || !x.meets(window) {
		return nil
	}
	prev, _ := ParseHex(c.PrevHead)
	if err := x.write(window, prev, true); err != nil {
		return err
	}
	if err := x.w.Checkpoint(token); err != nil {
		return err
	}
	return x.w.Flush()
}

// Close writes the entries no checkpoint covers yet, when they meet the
// range, and the end line.
func (x *Exporter) Close() error {
	if x.meets(x.pending) {
		if err := x.write(x.pending, x.head, x.known); err != nil {
			return err
		}
	}
	return x.w.Close()
}

func (x *Exporter) meets(entries []held) bool {
	for _, e := range entries {
		if (x.since.IsZero() || !e.at.Before(x.since)) && (x.until.IsZero() || !e.at.After(x.until)) {
			return true
		}
	}
	return false
}

// write writes entries with their chain hashes from prev (none when the
// start is not known).
func (x *Exporter) write(entries []held, prev Hash, known bool) error {
	for _, e := range entries {
		chain := ""
		if leaf, err := LeafHash(e.data); err == nil && known {
			prev = NextAt(prev, leaf, e.pos)
			chain = Hex(prev)
		} else {
			known = false
		}
		if err := x.w.Entry(e.pos, chain, e.data); err != nil {
			return err
		}
	}
	return nil
}

package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// ErrDuplicateKey is matched by every *DuplicateKeyError.
var ErrDuplicateKey = errors.New("contracts: duplicate object key")

// DuplicateKeyError reports an object that names the same key twice. Such a
// document is ambiguous: parsers differ on which value wins, so two readers
// of one message could act on different values. Keys are compared after
// unescaping, as a decoder sees them: "a" and "\u0061" are the same key.
type DuplicateKeyError struct {
	// Path is the JSON path of the repeated member: keys joined with ".",
	// array elements as [i], e.g. "run" or "tool_calls[0].arguments.amount".
	Path string
	// Offset is the byte offset of the second occurrence's key.
	Offset int
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("duplicate key %q (at byte %d)", e.Path, e.Offset)
}

// Is makes a DuplicateKeyError match ErrDuplicateKey and ErrInvalidJSON.
func (e *DuplicateKeyError) Is(target error) bool {
	return target == ErrDuplicateKey || target == ErrInvalidJSON
}

// Decode decodes the JSON document data into v after refusing duplicate
// object keys anywhere in it (a *DuplicateKeyError). Unknown fields are
// ignored, as bus readers must for forward compatibility; otherwise it
// behaves as json.Unmarshal, whose errors it returns for malformed input.
func Decode(data []byte, v any) error {
	if err := checkThenValid(data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// DecodeStrict is Decode that also refuses fields v does not have.
func DecodeStrict(data []byte, v any) error {
	if err := checkThenValid(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v) // CheckDuplicateKeys refused trailing data
}

// checkThenValid runs CheckDuplicateKeys, preferring encoding/json's own
// error for input that is not JSON at all.
func checkThenValid(data []byte) error {
	err := CheckDuplicateKeys(data)
	if err == nil || errors.Is(err, ErrDuplicateKey) {
		return err
	}
	var probe any
	if jerr := json.Unmarshal(data, &probe); jerr != nil {
		return jerr
	}
	return err // never expected: the checker is stricter than encoding/json
}

// maxDecodeDepth is encoding/json's nesting limit.
const maxDecodeDepth = 10000

// mapKeysAfter is the number of keys from which an object's keys are
// looked up in a map rather than compared one by one.
const mapKeysAfter = 64

// CheckDuplicateKeys reports whether data is exactly one JSON value (as
// json.Valid accepts it) in which no object names a key twice. It returns
// nil, a *DuplicateKeyError naming the first repeated key, or an error
// wrapping ErrInvalidJSON for input that is not JSON. It makes one pass
// over data and allocates only for escaped keys and for objects with many
// keys.
func CheckDuplicateKeys(data []byte) error {
	return checkJSON(data, false)
}

// ErrUnsafeInteger is matched by every *UnsafeIntegerError.
var ErrUnsafeInteger = errors.New("contracts: integer beyond ±(2^53−1)")

// UnsafeIntegerError reports an integer that I-JSON (RFC 7493) cannot carry
// exactly: beyond ±(2^53−1), a double rounds it, so what an approver sees,
// what is hashed and what runs could differ. A tool that needs one takes it
// as a string.
type UnsafeIntegerError struct {
	// Path is the JSON path of the number, as DuplicateKeyError's.
	Path string
	// Text is the number as written.
	Text string
}

func (e *UnsafeIntegerError) Error() string {
	return fmt.Sprintf("integer %s at %q is beyond ±(2^53−1) and cannot be represented exactly; send it as a string", e.Text, e.Path)
}

// Is makes an UnsafeIntegerError match ErrUnsafeInteger and ErrInvalidJSON.
func (e *UnsafeIntegerError) Is(target error) bool {
	return target == ErrUnsafeInteger || target == ErrInvalidJSON
}

// CheckIJSON is CheckDuplicateKeys that also refuses, with an
// *UnsafeIntegerError, an integer beyond ±(2^53−1) anywhere in data: what
// every surface that takes arguments checks at its door (DESIGN §4).
func CheckIJSON(data []byte) error {
	return checkJSON(data, true)
}

// maxSafeInteger is 2^53−1 as decimal digits.
const maxSafeInteger = "9007199254740991"

func checkJSON(data []byte, ijson bool) error {
	s := dupScannerPool.Get().(*dupScanner)
	s.ijson = ijson
	err := s.scan(data)
	s.reset()
	dupScannerPool.Put(s)
	return err
}

var dupScannerPool = sync.Pool{New: func() any { return new(dupScanner) }}

type dupScanner struct {
	data   []byte
	ijson  bool // refuse integers beyond ±(2^53−1)
	pos    int
	frames []dupFrame
	keys   [][]byte // the keys of open objects not in map mode, innermost last
}

type dupFrame struct {
	object   bool
	index    int                 // array: the current element
	keysFrom int                 // object: its first key in keys
	key      []byte              // object: the current key, unescaped
	keyAt    int                 // object: the current key's offset
	set      map[string]struct{} // object: its keys, once it has many
}

func (s *dupScanner) reset() {
	s.data, s.ijson = nil, false
	for i := range s.frames {
		s.frames[i] = dupFrame{}
	}
	s.frames = s.frames[:0]
	clear(s.keys)
	s.keys = s.keys[:0]
	if cap(s.keys) > 4096 {
		s.keys = nil // a huge document's keys are not kept for the next one
	}
	if cap(s.frames) > 4096 {
		s.frames = nil
	}
}

func (s *dupScanner) syntax(format string, args ...any) error {
	return fmt.Errorf("%w: %s (at byte %d)", ErrInvalidJSON, fmt.Sprintf(format, args...), s.pos)
}

func (s *dupScanner) unexpected() error {
	if s.pos >= len(s.data) {
		return s.syntax("unexpected end of input")
	}
	return s.syntax("unexpected character %q", s.data[s.pos])
}

func (s *dupScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *dupScanner) scan(data []byte) error {
	s.data, s.pos = data, 0
	for {
		// A value starts here.
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.unexpected()
		}
		if c := s.data[s.pos]; c == '{' || c == '[' {
			opened, err := s.open(c)
			if err != nil {
				return err
			}
			if opened {
				continue // its first element, or its first member's value
			}
		} else if err := s.scalar(c); err != nil {
			return err
		}
		// A value ended: close the containers it completes.
		if done, err := s.endValue(); err != nil || done {
			return err
		}
	}
}

// open reads the start of an object or array, and its first key. It
// reports false when the container is empty, so already a complete value.
func (s *dupScanner) open(c byte) (bool, error) {
	if len(s.frames) >= maxDecodeDepth {
		return false, s.syntax("nesting deeper than %d", maxDecodeDepth)
	}
	s.pos++
	s.skipSpace()
	if c == '[' {
		if s.pos < len(s.data) && s.data[s.pos] == ']' {
			s.pos++
			return false, nil
		}
		s.frames = append(s.frames, dupFrame{})
		return true, nil
	}
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return false, nil
	}
	s.frames = append(s.frames, dupFrame{object: true, keysFrom: len(s.keys)})
	return true, s.member()
}

// scalar reads a string, number or literal that starts with c.
func (s *dupScanner) scalar(c byte) error {
	switch {
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.unexpected()
}

// endValue closes the containers the value just read completes and moves
// past the comma before the next value (and, in an object, its key). It
// reports true when the top-level value is complete.
func (s *dupScanner) endValue() (bool, error) {
	for {
		s.skipSpace()
		if len(s.frames) == 0 {
			if s.pos < len(s.data) {
				return false, s.syntax("unexpected %q after the top-level value", s.data[s.pos])
			}
			return true, nil
		}
		if s.pos >= len(s.data) {
			return false, s.unexpected()
		}
		f := &s.frames[len(s.frames)-1]
		c := s.data[s.pos]
		if c == ',' {
			s.pos++
			if f.object {
				s.skipSpace()
				return false, s.member()
			}
			f.index++
			return false, nil // the next element
		}
		if f.object && c == '}' || !f.object && c == ']' {
			s.pos++
			if f.object && f.set == nil {
				clear(s.keys[f.keysFrom:])
				s.keys = s.keys[:f.keysFrom]
			}
			*f = dupFrame{}
			s.frames = s.frames[:len(s.frames)-1]
			continue
		}
		return false, s.unexpected()
	}
}

// member reads an object member's key and colon, refusing a key the
// innermost object already has.
func (s *dupScanner) member() error {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return s.unexpected()
	}
	at := s.pos
	end, plain, err := s.str()
	if err != nil {
		return err
	}
	var key []byte
	if plain {
		key = s.data[at+1 : end-1]
	} else {
		var k string
		if err := json.Unmarshal(s.data[at:end], &k); err != nil {
			s.pos = at
			return s.syntax("unreadable key")
		}
		key = []byte(k)
	}
	f := &s.frames[len(s.frames)-1]
	f.key, f.keyAt = key, at
	if f.set != nil {
		if _, dup := f.set[string(key)]; dup {
			return s.duplicate()
		}
		f.set[string(key)] = struct{}{}
	} else {
		mine := s.keys[f.keysFrom:]
		for _, k := range mine {
			if bytes.Equal(k, key) {
				return s.duplicate()
			}
		}
		if len(mine) < mapKeysAfter {
			s.keys = append(s.keys, key)
		} else {
			f.set = make(map[string]struct{}, 2*mapKeysAfter)
			for _, k := range mine {
				f.set[string(k)] = struct{}{}
			}
			f.set[string(key)] = struct{}{}
			clear(mine)
			s.keys = s.keys[:f.keysFrom]
		}
	}
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return s.unexpected()
	}
	s.pos++
	return nil
}

// duplicate builds the error for the innermost object's current key.
func (s *dupScanner) duplicate() error {
	return &DuplicateKeyError{Path: s.path(), Offset: s.frames[len(s.frames)-1].keyAt}
}

// path is the JSON path of the value at hand.
func (s *dupScanner) path() string {
	var b []byte
	for i, f := range s.frames {
		if f.object {
			if i > 0 {
				b = append(b, '.')
			}
			b = append(b, f.key...)
		} else {
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(f.index), 10)
			b = append(b, ']')
		}
	}
	return string(b)
}

// strClass marks the bytes a string cannot hold as they are: 1 for '"',
// '\\' and control characters, 2 for bytes of multi-byte UTF-8.
var strClass = func() (t [256]byte) {
	for c := range 0x20 {
		t[c] = 1
	}
	t['"'], t['\\'] = 1, 1
	for c := 0x80; c < 0x100; c++ {
		t[c] = 2
	}
	return t
}()

// str reads the string starting at s.pos, returning the offset just past
// its closing quote and whether it is plain: no escapes and valid UTF-8,
// so its bytes are its value.
func (s *dupScanner) str() (end int, plain bool, err error) {
	data := s.data
	start := s.pos
	i := s.pos + 1
	plain = true
	wide := false
	for {
		for i < len(data) && strClass[data[i]] == 0 {
			i++
		}
		if i >= len(data) {
			s.pos = i
			return 0, false, s.syntax("unterminated string")
		}
		switch c := data[i]; {
		case c == '"':
			i++
			s.pos = i
			if wide && plain && !utf8.Valid(data[start+1:i-1]) {
				plain = false
			}
			return i, plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(data) {
				s.pos = i + 1
				return 0, false, s.syntax("unterminated string")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := i + 2; j < i+6; j++ {
					if j >= len(data) || !isHex(data[j]) {
						s.pos = min(j, len(data))
						return 0, false, s.syntax("invalid \\u escape")
					}
				}
				i += 6
			default:
				s.pos = i + 1
				return 0, false, s.syntax("invalid escape")
			}
		case c < 0x20:
			s.pos = i
			return 0, false, s.syntax("control character in string")
		default:
			wide = true
			i++
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (s *dupScanner) digits() int {
	n := 0
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *dupScanner) number() error {
	start := s.pos
	if s.data[s.pos] == '-' {
		s.pos++
	}
	intFrom := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '0' {
		s.pos++
	} else if s.digits() == 0 {
		return s.unexpected()
	}
	if s.ijson && (s.pos >= len(s.data) || s.data[s.pos] != '.' && s.data[s.pos] != 'e' && s.data[s.pos] != 'E') {
		if d := s.data[intFrom:s.pos]; len(d) > len(maxSafeInteger) || len(d) == len(maxSafeInteger) && string(d) > maxSafeInteger {
			return &UnsafeIntegerError{Path: s.path(), Text: string(s.data[start:s.pos])}
		}
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.unexpected()
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.unexpected()
		}
	}
	return nil
}

func (s *dupScanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.unexpected()
	}
	s.pos += len(word)
	return nil
}

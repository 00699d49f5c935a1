package contracts

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalidJSON is wrapped by every error Canonicalize and ArgumentsSHA256
// return for input that is not acceptable JSON: syntax errors, trailing
// data, duplicate object keys, invalid UTF-8, lone surrogate escapes and
// numbers outside the IEEE-754 double range.
var ErrInvalidJSON = errors.New("contracts: invalid JSON")

// maxCanonicalDepth bounds the nesting of arrays and objects so hostile input
// cannot exhaust the stack.
const maxCanonicalDepth = 10000

// Canonicalize parses data as a single JSON value and returns its RFC 8785
// (JSON Canonicalization Scheme) serialization: no insignificant whitespace,
// object members sorted by the UTF-16 code units of their keys, strings
// escaped as ECMAScript JSON.stringify does, and numbers written as
// ECMAScript Number.prototype.toString writes the IEEE-754 double they denote.
//
// Input that RFC 8785 cannot represent is rejected with an error wrapping
// ErrInvalidJSON: duplicate keys within one object (compared after escape
// decoding), invalid UTF-8, lone surrogate escapes such as "\ud800", and
// numbers whose magnitude overflows a double. Numbers too small for a double
// become 0, as in ECMAScript.
func Canonicalize(data []byte) ([]byte, error) {
	p := jcsParsers.Get().(*jcsParser)
	defer p.release()
	p.data, p.pos, p.depth = data, 0, 0
	p.skipSpace()
	out, err := p.value(make([]byte, 0, len(data)))
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, p.errorf("unexpected %s after top-level value", p.describe())
	}
	return out, nil
}

// ArgumentsSHA256 returns the lowercase hex SHA-256 of the RFC 8785 form of
// tool-call arguments: the arguments_sha256 carried by requests, votes and
// outcomes. Empty or nil arguments hash as the empty object {}.
func ArgumentsSHA256(args []byte) (string, error) {
	if len(args) == 0 {
		args = []byte("{}")
	}
	canonical, err := Canonicalize(args)
	if err != nil {
		return "", err
	}
	return CanonicalSHA256(canonical), nil
}

// CanonicalSHA256 is ArgumentsSHA256 of arguments already in their RFC 8785
// form (what Canonicalize returns), without canonicalizing them again.
func CanonicalSHA256(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// jcsParser reads one JSON text and writes its canonical form as it goes.
// It keeps its working memory between calls in jcsParsers.
type jcsParser struct {
	data  []byte
	pos   int
	depth int
	// members holds the members of the objects being parsed, outermost
	// first, each object's in the order they appear.
	members []jcsMember
	// keys holds the decoded keys of members, one after another.
	keys []byte
	// keyTables holds the key tables of the objects being parsed that have
	// more than jcsLinearKeys members, outermost first.
	keyTables []int
	// scratch holds an object's members while they are written back in
	// sorted order.
	scratch []byte
}

// jcsObject locates the state of an object being parsed: its members start
// at members in p.members, their keys at keys in p.keys, and its key table,
// if it has one (table >= 0), at table in p.keyTables. A key table is an
// open-addressing hash set of the object's keys: a power of two of slots,
// at most half of them used, each 0 or 1 + the index of a member.
type jcsObject struct {
	members, keys, table int
}

// jcsMember is one parsed object member: its decoded key is p.keys[key:keyEnd]
// and its canonical "key":value text lies in the output at [start, end).
type jcsMember struct {
	key, keyEnd, start, end int
}

const (
	// jcsLinearKeys is how many keys an object may have before its keys
	// are looked up in a key table instead of compared one by one.
	jcsLinearKeys = 16
	// jcsInsertionSort is how many members an object may have that are
	// sorted by insertion.
	jcsInsertionSort = 24
	// jcsKeptMembers and jcsKeptBytes bound the memory a parser keeps for
	// the next call: members and key table slots, and bytes.
	jcsKeptMembers = 2048
	jcsKeptBytes   = 64 << 10
)

// jcsParsers holds parsers between calls, with their memory.
var jcsParsers = sync.Pool{New: func() any { return new(jcsParser) }}

// jcsSeed seeds the hashes of object keys.
var jcsSeed = maphash.MakeSeed()

// release returns p to jcsParsers, holding no reference to the input,
// unless its memory grew past jcsKeptMembers or jcsKeptBytes.
func (p *jcsParser) release() {
	if cap(p.members) > jcsKeptMembers || cap(p.keyTables) > jcsKeptMembers ||
		cap(p.keys) > jcsKeptBytes || cap(p.scratch) > jcsKeptBytes {
		return
	}
	p.data = nil
	p.members, p.keys, p.keyTables, p.scratch = p.members[:0], p.keys[:0], p.keyTables[:0], p.scratch[:0]
	jcsParsers.Put(p)
}

// jcsPlain marks the bytes a JSON string holds as themselves that its
// canonical form holds unescaped too: printable ASCII but the quote and the
// backslash.
var jcsPlain = func() (plain [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
	}
	return plain
}()

func (p *jcsParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrInvalidJSON, p.pos, fmt.Sprintf(format, args...))
}

// describe names the input at the current position for error messages.
func (p *jcsParser) describe() string {
	if p.pos >= len(p.data) {
		return "end of input"
	}
	c := p.data[p.pos]
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *jcsParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses the JSON value at the current position and appends its
// canonical form to dst.
func (p *jcsParser) value(dst []byte) ([]byte, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input, expected a value")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		return p.appendString(dst)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	default:
		return nil, p.errorf("unexpected %s, expected a value", p.describe())
	}
}

func (p *jcsParser) literal(dst []byte, word string) ([]byte, error) {
	end := p.pos + len(word)
	if end > len(p.data) || string(p.data[p.pos:end]) != word {
		return nil, p.errorf("invalid literal, expected %s", word)
	}
	p.pos = end
	return append(dst, word...), nil
}

func (p *jcsParser) enter() error {
	p.depth++
	if p.depth > maxCanonicalDepth {
		return p.errorf("nesting deeper than %d levels", maxCanonicalDepth)
	}
	return nil
}

func (p *jcsParser) array(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	dst = append(dst, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return append(dst, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			dst = append(dst, ',')
		}
		p.skipSpace()
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.depth--
			return append(dst, ']'), nil
		default:
			return nil, p.errorf("unexpected %s in array, expected ',' or ']'", p.describe())
		}
	}
}

func (p *jcsParser) object(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return append(dst, '{', '}'), nil
	}
	body, obj := len(dst)+1, jcsObject{members: len(p.members), keys: len(p.keys), table: -1}
	dst = append(dst, '{')
	for {
		if len(p.members) > obj.members {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = p.member(dst, &obj); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in object")
		}
		c := p.data[p.pos]
		if c == ',' {
			p.pos++
			continue
		}
		if c != '}' {
			return nil, p.errorf("unexpected %s in object, expected ',' or '}'", p.describe())
		}
		p.pos++
		p.depth--
		break
	}
	dst = p.sortMembers(dst, body, obj.members)
	p.members, p.keys = p.members[:obj.members], p.keys[:obj.keys]
	if obj.table >= 0 {
		p.keyTables = p.keyTables[:obj.table]
	}
	return append(dst, '}'), nil
}

// member parses one "key": value of the object obj, appends its canonical
// "key":value text to dst and adds it to p.members.
func (p *jcsParser) member(dst []byte, obj *jcsObject) ([]byte, error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input in object, expected a key")
	}
	if p.data[p.pos] != '"' {
		return nil, p.errorf("unexpected %s in object, expected a string key", p.describe())
	}
	keyPos, m := p.pos, jcsMember{key: len(p.keys), start: len(dst)}
	verbatim, err := p.key()
	if err != nil {
		return nil, err
	}
	m.keyEnd = len(p.keys)
	key := p.keys[m.key:m.keyEnd]
	if p.duplicate(key, obj) {
		p.pos = keyPos
		return nil, p.errorf("duplicate object key %q", string(key))
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return nil, p.errorf("unexpected %s after object key, expected ':'", p.describe())
	}
	p.pos++
	p.skipSpace()
	if verbatim {
		dst = append(append(append(dst, '"'), key...), '"', ':')
	} else {
		dst = append(appendCanonicalString(dst, key), ':')
	}
	if dst, err = p.value(dst); err != nil {
		return nil, err
	}
	m.end = len(dst)
	p.members = append(p.members, m)
	return dst, nil
}

// duplicate reports whether key is among the keys of the object obj so far.
// Past jcsLinearKeys keys it looks key up in the object's key table, made
// then, and adds it there.
func (p *jcsParser) duplicate(key []byte, obj *jcsObject) bool {
	members := p.members[obj.members:]
	switch {
	case obj.table < 0 && len(members) < jcsLinearKeys:
		for _, m := range members {
			if string(p.keys[m.key:m.keyEnd]) == string(key) {
				return true
			}
		}
		return false
	case obj.table < 0:
		obj.table = len(p.keyTables)
		p.indexKeys(obj, 4*jcsLinearKeys)
	case 2*(len(members)+1) > len(p.keyTables)-obj.table:
		p.indexKeys(obj, 2*(len(p.keyTables)-obj.table))
	}
	slots := p.keyTables[obj.table:]
	mask := uint64(len(slots) - 1)
	for i := maphash.Bytes(jcsSeed, key) & mask; ; i = (i + 1) & mask {
		if slots[i] == 0 {
			slots[i] = len(members) + 1
			return false
		}
		if m := members[slots[i]-1]; string(p.keys[m.key:m.keyEnd]) == string(key) {
			return true
		}
	}
}

// indexKeys gives the object obj, whose key table is the last one, a key
// table of size slots, a power of two, holding its members' keys.
func (p *jcsParser) indexKeys(obj *jcsObject, size int) {
	p.keyTables = append(p.keyTables[:obj.table], make([]int, size)...)
	slots := p.keyTables[obj.table:]
	mask := uint64(size - 1)
	for j, m := range p.members[obj.members:] {
		i := maphash.Bytes(jcsSeed, p.keys[m.key:m.keyEnd]) & mask
		for slots[i] != 0 {
			i = (i + 1) & mask
		}
		slots[i] = j + 1
	}
}

// sortMembers puts the members p.members[from:] of the object whose
// comma-separated members begin at body in dst in the order of their keys'
// UTF-16 code units.
func (p *jcsParser) sortMembers(dst []byte, body, from int) []byte {
	members := p.members[from:]
	if !sortByKey(members, p.keys) {
		return dst
	}
	p.scratch = append(p.scratch[:0], dst[body:]...)
	dst = dst[:body]
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.scratch[m.start-body:m.end-body]...)
	}
	return dst
}

// sortByKey sorts members, whose keys in keys are unique, by their keys'
// UTF-16 code units, and reports whether that changed their order.
func sortByKey(members []jcsMember, keys []byte) bool {
	byKey := func(a, b jcsMember) int {
		return compareUTF16(keys[a.key:a.keyEnd], keys[b.key:b.keyEnd])
	}
	if len(members) > jcsInsertionSort {
		if slices.IsSortedFunc(members, byKey) {
			return false
		}
		slices.SortFunc(members, byKey)
		return true
	}
	moved := false
	for i := 1; i < len(members); i++ {
		m, j := members[i], i
		for ; j > 0 && byKey(m, members[j-1]) < 0; j-- {
			members[j] = members[j-1]
		}
		if j < i {
			members[j], moved = m, true
		}
	}
	return moved
}

// compareUTF16 compares the valid UTF-8 strings a and b by their UTF-16
// code units, the order of RFC 8785 keys. It differs from the order of their
// bytes only where a character past U+FFFF meets one in U+E000–U+FFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	if a[i] < utf8.RuneSelf || b[i] < utf8.RuneSelf {
		return cmp.Compare(a[i], b[i])
	}
	// The strings agree up to the character holding byte i, and differ in
	// that character.
	for !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	return cmp.Compare(utf16Order(ra), utf16Order(rb))
}

// utf16Order maps characters to numbers ordered as the characters' UTF-16
// code units are: those past U+FFFF, whose first unit is a surrogate
// (U+D800–U+DBFF), come before U+E000–U+FFFF.
func utf16Order(r rune) rune {
	if r >= 0xe000 && r <= 0xffff {
		return r + 0x200000
	}
	return r
}

// key parses the object key at the current position (which holds the
// opening quote), appends its decoded, valid UTF-8 contents to p.keys, and
// reports whether they are its source text verbatim, with no escape
// sequences.
func (p *jcsParser) key() (verbatim bool, err error) {
	p.pos++ // opening quote
	verbatim = true
	for {
		run := p.pos
		if err := p.stringRun(); err != nil {
			return false, err
		}
		p.keys = append(p.keys, p.data[run:p.pos]...)
		if p.data[p.pos] == '"' {
			p.pos++
			return verbatim, nil
		}
		if p.keys, err = p.escape(p.keys); err != nil {
			return false, err
		}
		verbatim = false
	}
}

// appendString parses the JSON string at the current position (which holds
// the opening quote) and appends its canonical form to dst.
func (p *jcsParser) appendString(dst []byte) ([]byte, error) {
	p.pos++ // opening quote
	dst = append(dst, '"')
	for {
		run := p.pos
		if err := p.stringRun(); err != nil {
			return nil, err
		}
		dst = append(dst, p.data[run:p.pos]...)
		if p.data[p.pos] == '"' {
			p.pos++
			return append(dst, '"'), nil
		}
		decoded := len(dst)
		var err error
		if dst, err = p.escape(dst); err != nil {
			return nil, err
		}
		// Only single bytes can need escaping in canonical form.
		if c := dst[decoded]; len(dst) == decoded+1 && !jcsPlain[c] {
			dst = appendEscapedByte(dst[:decoded], c)
		}
	}
}

// stringRun advances over string contents up to the next quote or
// backslash, checking that they are valid UTF-8 without control characters.
// The current position then holds that quote or backslash.
func (p *jcsParser) stringRun() error {
	data, i := p.data, p.pos
	for i < len(data) {
		c := data[i]
		if jcsPlain[c] {
			i++
			continue
		}
		p.pos = i
		switch {
		case c == '"' || c == '\\':
			return nil
		case c < 0x20:
			return p.errorf("control character 0x%02x in string must be escaped", c)
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return p.errorf("invalid UTF-8 in string")
		}
		i += size
	}
	p.pos = i
	return p.errorf("unterminated string")
}

// escape decodes the escape sequence at the current position (which holds
// the backslash) and appends the character it denotes to buf.
func (p *jcsParser) escape(buf []byte) ([]byte, error) {
	if p.pos+1 >= len(p.data) {
		p.pos = len(p.data)
		return nil, p.errorf("unterminated string")
	}
	var c byte
	switch p.data[p.pos+1] {
	case '"':
		c = '"'
	case '\\':
		c = '\\'
	case '/':
		c = '/'
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		return p.unicodeEscape(buf)
	default:
		p.pos++
		return nil, p.errorf("invalid escape sequence: unexpected %s after backslash", p.describe())
	}
	p.pos += 2
	return append(buf, c), nil
}

// unicodeEscape decodes a \uXXXX escape, joining a surrogate pair written as
// two escapes, and appends the resulting character to buf as UTF-8.
func (p *jcsParser) unicodeEscape(buf []byte) ([]byte, error) {
	r, ok := p.hex4(p.pos + 2)
	if !ok {
		return nil, p.errorf("invalid \\u escape, expected four hex digits")
	}
	switch {
	case r >= 0xdc00 && r <= 0xdfff:
		return nil, p.errorf("lone low surrogate \\u%04x", r)
	case r >= 0xd800 && r <= 0xdbff:
		next := p.pos + 6
		if next+1 >= len(p.data) || p.data[next] != '\\' || p.data[next+1] != 'u' {
			return nil, p.errorf("lone high surrogate \\u%04x", r)
		}
		low, ok := p.hex4(next + 2)
		if !ok {
			p.pos = next
			return nil, p.errorf("invalid \\u escape, expected four hex digits")
		}
		if low < 0xdc00 || low > 0xdfff {
			return nil, p.errorf("lone high surrogate \\u%04x", r)
		}
		p.pos = next + 6
		return utf8.AppendRune(buf, utf16.DecodeRune(r, low)), nil
	default:
		p.pos += 6
		return utf8.AppendRune(buf, r), nil
	}
}

// hex4 reads four hex digits starting at offset i.
func (p *jcsParser) hex4(i int) (rune, bool) {
	if i+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[i : i+4] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// number parses a JSON number and appends the ECMAScript form of the double
// it denotes.
func (p *jcsParser) number(dst []byte) ([]byte, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := p.pos
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		p.skipDigits()
	default:
		return nil, p.errorf("invalid number, expected a digit")
	}
	if p.pos-digits <= 15 && !p.atFractionOrExponent() {
		// An integer of at most 15 digits is exact as a double and written
		// as its digits, without the sign of -0.
		if p.data[start] == '-' && p.data[digits] == '0' {
			start = digits
		}
		return append(dst, p.data[start:p.pos]...), nil
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if !p.atDigit() {
			return nil, p.errorf("invalid number, expected a digit after '.'")
		}
		p.skipDigits()
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if !p.atDigit() {
			return nil, p.errorf("invalid number, expected a digit in exponent")
		}
		p.skipDigits()
	}
	f, err := strconv.ParseFloat(string(p.data[start:p.pos]), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		text := string(p.data[start:p.pos])
		p.pos = start
		return nil, p.errorf("number %s is outside the IEEE-754 double range", text)
	}
	return appendCanonicalNumber(dst, f), nil
}

// atFractionOrExponent reports whether the current position holds the '.'
// or the 'e' that continues a number past its integer part.
func (p *jcsParser) atFractionOrExponent() bool {
	if p.pos >= len(p.data) {
		return false
	}
	c := p.data[p.pos]
	return c == '.' || c == 'e' || c == 'E'
}

func (p *jcsParser) atDigit() bool {
	return p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9'
}

func (p *jcsParser) skipDigits() {
	for p.atDigit() {
		p.pos++
	}
}

// appendCanonicalNumber appends f as ECMAScript Number.prototype.toString
// writes it. f must be finite.
func appendCanonicalNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // both +0 and -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits in the form d[.ddd]e±x.
	var scratch [32]byte
	sci := strconv.AppendFloat(scratch[:0], f, 'e', -1, 64)
	var (
		digits [24]byte
		k      int
		i      int
	)
	for ; sci[i] != 'e'; i++ {
		if sci[i] != '.' {
			digits[k] = sci[i]
			k++
		}
	}
	i++ // 'e'
	negExp := sci[i] == '-'
	i++ // sign
	exp := 0
	for ; i < len(sci); i++ {
		exp = exp*10 + int(sci[i]-'0')
	}
	if negExp {
		exp = -exp
	}
	// The value is 0.d1d2...dk × 10^n.
	n := exp + 1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits[:k]...)
		for ; n > k; n-- {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:k]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for ; n < 0; n++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits[:k]...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:k]...)
		}
		dst = append(dst, 'e')
		if exp < 0 {
			dst = append(dst, '-')
			exp = -exp
		} else {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(exp), 10)
	}
	return dst
}

// appendCanonicalString appends s, which is valid UTF-8, as a JSON string
// escaped the way RFC 8785 requires: only the quote, the backslash and
// control characters are escaped.
func appendCanonicalString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = appendEscapedByte(append(dst, s[start:i]...), c)
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscapedByte appends the escape sequence of c, the quote, the
// backslash or a control character: its short form where one exists and
// lowercase \u00xx otherwise.
func appendEscapedByte(dst []byte, c byte) []byte {
	const hexDigits = "0123456789abcdef"
	switch c {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	default:
		return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
	}
}

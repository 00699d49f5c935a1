package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
	p := &jcsParser{data: data}
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
type jcsParser struct {
	data  []byte
	pos   int
	depth int
}

// jcsMember is one parsed object member; its canonical value lives in a
// shared buffer at [start, end).
type jcsMember struct {
	key        string
	units      []uint16
	start, end int
}

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
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendCanonicalString(dst, s), nil
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
	var (
		members []jcsMember
		values  []byte
		seen    = make(map[string]struct{})
	)
	for {
		m, next, err := p.member(values, seen)
		if err != nil {
			return nil, err
		}
		members, values = append(members, m), next
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
	return appendMembers(dst, members, values), nil
}

// member parses one "key": value of an object, appending the value's
// canonical form to values; seen holds the object's keys so far.
func (p *jcsParser) member(values []byte, seen map[string]struct{}) (jcsMember, []byte, error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return jcsMember{}, nil, p.errorf("unexpected end of input in object, expected a key")
	}
	if p.data[p.pos] != '"' {
		return jcsMember{}, nil, p.errorf("unexpected %s in object, expected a string key", p.describe())
	}
	keyPos := p.pos
	key, err := p.str()
	if err != nil {
		return jcsMember{}, nil, err
	}
	if _, dup := seen[key]; dup {
		p.pos = keyPos
		return jcsMember{}, nil, p.errorf("duplicate object key %q", key)
	}
	seen[key] = struct{}{}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return jcsMember{}, nil, p.errorf("unexpected %s after object key, expected ':'", p.describe())
	}
	p.pos++
	p.skipSpace()
	start := len(values)
	if values, err = p.value(values); err != nil {
		return jcsMember{}, nil, err
	}
	return jcsMember{key: key, units: utf16.Encode([]rune(key)), start: start, end: len(values)}, values, nil
}

// appendMembers appends the object of members, sorted by their keys' UTF-16
// code units, with their values' canonical forms from values.
func appendMembers(dst []byte, members []jcsMember, values []byte) []byte {
	// Keys are unique, so the order is total.
	slices.SortFunc(members, func(a, b jcsMember) int {
		return slices.Compare(a.units, b.units)
	})
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCanonicalString(dst, m.key)
		dst = append(dst, ':')
		dst = append(dst, values[m.start:m.end]...)
	}
	return append(dst, '}')
}

// str parses the JSON string at the current position (which holds the
// opening quote) and returns its decoded, valid UTF-8 contents.
func (p *jcsParser) str() (string, error) {
	p.pos++ // opening quote
	var buf []byte
	for {
		// Copy the run of bytes that need no decoding in one step.
		run := p.pos
		for run < len(p.data) {
			c := p.data[run]
			if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				break
			}
			run++
		}
		buf = append(buf, p.data[p.pos:run]...)
		p.pos = run
		if p.pos >= len(p.data) {
			return "", p.errorf("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c == '\\':
			var err error
			if buf, err = p.escape(buf); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.errorf("control character 0x%02x in string must be escaped", c)
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errorf("invalid UTF-8 in string")
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
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
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		p.skipDigits()
	default:
		return nil, p.errorf("invalid number, expected a digit")
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
	text := string(p.data[start:p.pos])
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		p.pos = start
		return nil, p.errorf("number %s is outside the IEEE-754 double range", text)
	}
	return appendCanonicalNumber(dst, f), nil
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
// control characters are escaped, using the short forms where they exist and
// lowercase \u00xx otherwise.
func appendCanonicalString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

package contracts

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// canonicalizeCases are inputs where Canonicalize's shortcuts meet the
// corners of RFC 8785: key order by UTF-16 code units, keys equal only after
// escape decoding, objects past the size where duplicate keys are looked up
// by hash, strings that need escaping, and input to refuse.
var canonicalizeCases = []string{
	// Sorting: characters past U+FFFF (surrogate pairs in UTF-16) sort
	// before U+E000–U+FFFF, unlike their UTF-8 bytes.
	`{"\ud83d\ude00":1,"\ue000":2,"\uffff":3,"\ud800\udc00":4,"z":5,"\u00e9":6,"\ud7ff":7}`,
	"{\"😀\":1,\"\ue000\":2,\"\uffff\":3,\"𐀀\":4,\"z\":5,\"é\":6,\"\ud7ff\":7,\"\U0010ffff\":8}",
	"{\"a😀\":1,\"a\ue000\":2,\"a\":3,\"ab\":4,\"a\uffff\":5,\"a𐀀b\":6,\"a𐀀\":7}",
	"{\"\uff61\":1,\"\U0001f600\":2,\"\u20ac\":3,\"\r\":4,\"1\":5,\"\u0080\":6,\"\u00f6\":7,\"\ufb33\":8}",
	`{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}`,
	`{"b":1,"a":{"d":[{"z":1,"y":2}],"c":{"\u00e9":1,"e":2}}}`,
	`{"a":1,"b":2,"c":3}`,
	// Keys equal after escape decoding are duplicates.
	`{"a":1,"\u0061":2}`,
	`{"\u0061":1,"a":2}`,
	"{\"\\u00e9\":1,\"é\":2}",
	"{\"😀\":1,\"\\ud83d\\ude00\":2}",
	`{"\/":1,"/":2}`,
	`{"\"":1,"\u0022":2}`,
	`{"a\nb":1,"a\u000ab":2}`,
	`{"x":{"a":1},"y":{"a":1},"x":2}`,
	// Empty keys.
	`{"":1}`,
	`{"a":1,"":2}`,
	`{"":1,"a":2,"":3}`,
	`{"":{"":{"":[]}}}`,
	// Strings.
	`"\"\\\/\b\f\n\r\t"`,
	`"\u0000\u0001\u0007\u001f\u0020\u007f\u0080\u2028\u2029\ufeff"`,
	`"a\u0022b\u005cc"`,
	`"\ud83d\ude00 \uD83D\uDE00 \u00E9"`,
	"\"tab\\tnewline\\n\u00e9\u20ac😀\x7f\"",
	`{"k\u0000":"\u0000","k\u001f":"\u001f","k\"":"\"","k\\":"\\"}`,
	`""`,
	`"\\"`,
	// Numbers.
	`[0,-0,-0.0,0.0,1,-1,1.0,1e0,1E2,10e-1,123456789012345,-123456789012345]`,
	`[1234567890123456,12345678901234567,12345678901234567890,123456789012345678901234]`,
	`[9007199254740993,1e21,1e-7,0.1,5e-324,1.7976931348623157e308,-5e-324]`,
	`[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]`,
	// Input to refuse, and which error comes first.
	`{"a":1,"a":2,}`,
	`{"a":1,"a":}`,
	`{"a":1,"a"`,
	`{"a":1,"b":2,"a" 3}`,
	`{"a":[1,2,],"a":1}`,
	`{"a":{"b":1,"b":2},"a":3}`,
	`{"a":1,"b":{"c":1,"c"}}`,
	"{\"a\":1,\"\xff\":2}",
	"{\"\xff\":1,\"\xff\":2}",
	"\"\xff\"",
	"\"\xe2\x82\"",
	"\"\xed\xa0\x80\"",
	"\"\xc0\xaf\"",
	"\"a\nb\"",
	"{\"a\tb\":1}",
	`{"\ud800":1}`,
	`{"\ud800\u0041":1}`,
	`{"\udc00":1}`,
	`{"\u12":1}`,
	`{"\x":1}`,
	`{"ab\`,
	`{"ab\u00`,
	`"\ud800\ud800"`,
	`"\ud800\`,
	`"abc`,
	`"abc\`,
	`{"a":1`,
	`{"a" : 1 , "b"`,
	`[1,2`,
	`-`,
	`-a`,
	`-01`,
	`01`,
	`1.`,
	`1e+`,
	`1e400`,
	`-1e400`,
	`[1,1e999]`,
	`{"a":1} x`,
	`tru`,
	``,
	" \t\n\r{ \"b\" : [ 1 , 2 ] , \"a\" : null } \n",
}

// TestCanonicalizeMatchesReference checks Canonicalize against
// refCanonicalize, a direct implementation of RFC 8785, on inputs built to
// reach its corners.
func TestCanonicalizeMatchesReference(t *testing.T) {
	for _, in := range canonicalizeCases {
		checkAgainstReference(t, []byte(in))
	}
	for _, in := range bigObjectCases() {
		checkAgainstReference(t, []byte(in))
	}
	rng := rand.New(rand.NewPCG(8785, 1))
	for range 3000 {
		checkAgainstReference(t, []byte(randomObject(rng, 0)))
	}
}

// checkAgainstReference fails t unless Canonicalize and refCanonicalize
// give the same output, or the same error, for in.
func checkAgainstReference(t *testing.T, in []byte) {
	t.Helper()
	want, wantErr := refCanonicalize(in)
	got, err := Canonicalize(in)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Errorf("Canonicalize(%q) error = %v, want %v", in, err, wantErr)
	}
	if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
		t.Errorf("Canonicalize(%q)\n got  %q\n want %q", in, got, want)
	}
}

// bigObjectCases are objects around and well past jcsLinearKeys members,
// with and without a duplicate key at various places.
func bigObjectCases() []string {
	var cases []string
	for _, n := range []int{15, 16, 17, 18, 24, 25, 33, 64, 65, 300} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%03d", (i*7919)%n)
		}
		cases = append(cases, objectOf(keys))
		for _, at := range []int{1, n / 2, n - 1, n} {
			for _, of := range []int{0, at - 1} {
				dup := slices.Insert(slices.Clone(keys), at, keys[of])
				cases = append(cases, objectOf(dup))
				escaped := slices.Clone(dup)
				escaped[at] = `\u006b` + keys[of][1:]
				cases = append(cases, objectOf(escaped))
			}
		}
	}
	return cases
}

// objectOf is a JSON object with the given keys, written as they are, and
// small values.
func objectOf(keys []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%s":%d`, k, i)
	}
	b.WriteByte('}')
	return b.String()
}

// keyPieces are the parts random keys are made of: ASCII, characters just
// below and above the surrogate range, past U+FFFF, and escape sequences
// (some of them spelling the same characters as other pieces).
var keyPieces = []string{
	"a", "b", "z", "A", "0", " ", "~", "\x7f", "é", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff",
	"𐀀", "😀", "\U0010ffff", `\u0061`, `\u00e9`, `\ud83d\ude00`, `\ue000`, `\n`, `\"`, `\\`, `\/`, `\u0000`,
}

// randomKey is a key of up to three pieces, often sharing a prefix with
// other keys.
func randomKey(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(4) {
		b.WriteString(keyPieces[rng.IntN(len(keyPieces))])
	}
	return b.String()
}

// randomObject is a JSON object of random keys, some repeated, and random
// values, nested objects and arrays among them.
func randomObject(rng *rand.Rand, depth int) string {
	n := rng.IntN(6)
	if rng.IntN(4) == 0 {
		n = rng.IntN(40)
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteString(", "[:1+rng.IntN(2)])
		}
		fmt.Fprintf(&b, `"%s":%s`, randomKey(rng), randomValue(rng, depth))
	}
	b.WriteByte('}')
	return b.String()
}

// randomValue is a random JSON value.
func randomValue(rng *rand.Rand, depth int) string {
	switch k := rng.IntN(10); {
	case k == 0 && depth < 4:
		return randomObject(rng, depth+1)
	case k == 1 && depth < 4:
		return "[" + randomValue(rng, depth+1) + "," + randomObject(rng, depth+1) + "]"
	case k == 2:
		return strconv.FormatFloat(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(50)-25)), 'g', -1, 64)
	case k == 3:
		return strconv.FormatInt(rng.Int64N(1<<53)-1<<52, 10)
	case k == 4:
		return []string{"true", "false", "null", "-0", "0.0", "1e21"}[rng.IntN(6)]
	default:
		return `"` + randomKey(rng) + randomKey(rng) + `"`
	}
}

// The reference sorts keys by their UTF-16 code units with utf16.Encode;
// a check of that order on its own, so the reference is right too.
func TestReferenceKeyOrder(t *testing.T) {
	keys := []string{"\ue000", "\uffff", "😀", "𐀀", "\ud7ff", "a", "", "é", "\U0010ffff"}
	want := []string{"", "a", "é", "\ud7ff", "𐀀", "😀", "\U0010ffff", "\ue000", "\uffff"}
	slices.SortFunc(keys, func(a, b string) int {
		return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
	})
	if !slices.Equal(keys, want) {
		t.Fatalf("UTF-16 order %q, want %q", keys, want)
	}
	var obj []string
	for i, k := range keys {
		obj = append(obj, fmt.Sprintf(`"%s":%d`, k, i))
	}
	rev := slices.Clone(obj)
	slices.Reverse(rev)
	got, err := Canonicalize([]byte("{" + strings.Join(rev, ",") + "}"))
	if err != nil || string(got) != "{"+strings.Join(obj, ",")+"}" {
		t.Fatalf("Canonicalize = %s, %v; want keys in the order %q", got, err, want)
	}
	if !utf8.ValidString(string(got)) {
		t.Fatalf("output %q is not UTF-8", got)
	}
}

// Canonicalize is safe for concurrent use, and what it returns stays the
// caller's.
func TestCanonicalizeConcurrent(t *testing.T) {
	inputs := append(slices.Clone(canonicalizeCases), bigObjectCases()...)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			var kept [][]byte
			for i := range inputs {
				in := []byte(inputs[(i+w*7)%len(inputs)])
				want, _ := refCanonicalize(in)
				got, _ := Canonicalize(in)
				if !bytes.Equal(got, want) {
					t.Errorf("Canonicalize(%q) = %q, want %q", in, got, want)
				}
				kept = append(kept, want, got)
			}
			for i := 0; i < len(kept); i += 2 {
				if !bytes.Equal(kept[i], kept[i+1]) {
					t.Errorf("output changed after later calls: %q, want %q", kept[i+1], kept[i])
				}
			}
		})
	}
	wg.Wait()
}

// FuzzCanonicalizeMatchesReference checks Canonicalize against
// refCanonicalize on any input: the same output, or the same error.
func FuzzCanonicalizeMatchesReference(f *testing.F) {
	for _, in := range canonicalizeCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAgainstReference(t, in)
	})
}

// refCanonicalize is RFC 8785 written out directly: a set of keys per object
// to find duplicates, keys sorted by their utf16.Encode code units, strings
// decoded in full and then escaped again, member values gathered in a buffer
// of their own. Canonicalize must agree with it byte for byte, errors
// included.
func refCanonicalize(data []byte) ([]byte, error) {
	p := &refParser{data: data}
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

// refParser reads one JSON text and writes its canonical form as it goes.
type refParser struct {
	data  []byte
	pos   int
	depth int
}

// refMember is one parsed object member; its canonical value lives in a
// shared buffer at [start, end).
type refMember struct {
	key        string
	units      []uint16
	start, end int
}

func (p *refParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrInvalidJSON, p.pos, fmt.Sprintf(format, args...))
}

// describe names the input at the current position for error messages.
func (p *refParser) describe() string {
	if p.pos >= len(p.data) {
		return "end of input"
	}
	c := p.data[p.pos]
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *refParser) skipSpace() {
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
func (p *refParser) value(dst []byte) ([]byte, error) {
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
		return refAppendCanonicalString(dst, s), nil
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

func (p *refParser) literal(dst []byte, word string) ([]byte, error) {
	end := p.pos + len(word)
	if end > len(p.data) || string(p.data[p.pos:end]) != word {
		return nil, p.errorf("invalid literal, expected %s", word)
	}
	p.pos = end
	return append(dst, word...), nil
}

func (p *refParser) enter() error {
	p.depth++
	if p.depth > maxCanonicalDepth {
		return p.errorf("nesting deeper than %d levels", maxCanonicalDepth)
	}
	return nil
}

func (p *refParser) array(dst []byte) ([]byte, error) {
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

func (p *refParser) object(dst []byte) ([]byte, error) {
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
		members []refMember
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
	return refAppendMembers(dst, members, values), nil
}

// member parses one "key": value of an object, appending the value's
// canonical form to values; seen holds the object's keys so far.
func (p *refParser) member(values []byte, seen map[string]struct{}) (refMember, []byte, error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return refMember{}, nil, p.errorf("unexpected end of input in object, expected a key")
	}
	if p.data[p.pos] != '"' {
		return refMember{}, nil, p.errorf("unexpected %s in object, expected a string key", p.describe())
	}
	keyPos := p.pos
	key, err := p.str()
	if err != nil {
		return refMember{}, nil, err
	}
	if _, dup := seen[key]; dup {
		p.pos = keyPos
		return refMember{}, nil, p.errorf("duplicate object key %q", key)
	}
	seen[key] = struct{}{}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return refMember{}, nil, p.errorf("unexpected %s after object key, expected ':'", p.describe())
	}
	p.pos++
	p.skipSpace()
	start := len(values)
	if values, err = p.value(values); err != nil {
		return refMember{}, nil, err
	}
	return refMember{key: key, units: utf16.Encode([]rune(key)), start: start, end: len(values)}, values, nil
}

// refAppendMembers appends the object of members, sorted by their keys' UTF-16
// code units, with their values' canonical forms from values.
func refAppendMembers(dst []byte, members []refMember, values []byte) []byte {
	// Keys are unique, so the order is total.
	slices.SortFunc(members, func(a, b refMember) int {
		return slices.Compare(a.units, b.units)
	})
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = refAppendCanonicalString(dst, m.key)
		dst = append(dst, ':')
		dst = append(dst, values[m.start:m.end]...)
	}
	return append(dst, '}')
}

// str parses the JSON string at the current position (which holds the
// opening quote) and returns its decoded, valid UTF-8 contents.
func (p *refParser) str() (string, error) {
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

// escape decodes the escape sequence at the current position with the
// package's own decoder: the escapes are not what the reference checks
// (its object order, duplicate keys and number forms are).
func (p *refParser) escape(buf []byte) ([]byte, error) {
	q := &jcsParser{data: p.data, pos: p.pos}
	out, err := q.escape(buf)
	p.pos = q.pos
	return out, err
}

// number parses a JSON number and appends the ECMAScript form of the double
// it denotes.
func (p *refParser) number(dst []byte) ([]byte, error) {
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

func (p *refParser) atDigit() bool {
	return p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9'
}

func (p *refParser) skipDigits() {
	for p.atDigit() {
		p.pos++
	}
}

// refAppendCanonicalString appends s, which is valid UTF-8, as a JSON string
// escaped the way RFC 8785 requires: only the quote, the backslash and
// control characters are escaped, using the short forms where they exist and
// lowercase \u00xx otherwise.
func refAppendCanonicalString(dst []byte, s string) []byte {
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

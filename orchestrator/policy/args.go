package policy

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxArgsDepth bounds the nesting of arguments a condition can read.
const maxArgsDepth = 256

var errArgsNotObject = errors.New("arguments are not a JSON object")

// decodeArgs decodes the call's arguments for conditions: a JSON object
// into map[string]any, with whole numbers that fit as int64 and every other
// number as float64, so that CEL sees 250 as an int and 250.5 as a double
// and `args.amount > 100` compares naturally for both. Empty or null
// arguments are an empty object. It is a small strict decoder (RFC 8259),
// several times faster than encoding/json into any, because it runs once
// per evaluated call.
func decodeArgs(raw []byte) (map[string]any, error) {
	d := jsonDecoder{s: raw}
	// One copy of the input, which strings without escapes (nearly all)
	// are slices of: one allocation instead of one per key and value.
	d.str0 = string(raw)
	d.space()
	if d.i == len(d.s) {
		return map[string]any{}, nil
	}
	if d.s[d.i] != '{' {
		if d.literal("null") {
			d.space()
			if d.i == len(d.s) {
				return map[string]any{}, nil
			}
		}
		return nil, errArgsNotObject
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.s) {
		return nil, d.errorf("data after the object")
	}
	return v.(map[string]any), nil
}

type jsonDecoder struct {
	s    []byte
	str0 string // string(s)
	i    int
}

func (d *jsonDecoder) errorf(msg string) error {
	return errors.New("arguments are not valid JSON: " + msg + " at offset " + strconv.Itoa(d.i))
}

func (d *jsonDecoder) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) literal(word string) bool {
	if len(d.s)-d.i >= len(word) && string(d.s[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	return false
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if depth > maxArgsDepth {
		return nil, d.errorf("nested too deeply")
	}
	d.space()
	if d.i == len(d.s) {
		return nil, d.errorf("unexpected end")
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case d.literal("true"):
		return true, nil
	case d.literal("false"):
		return false, nil
	case d.literal("null"):
		return nil, nil
	}
	return nil, d.errorf("unexpected character " + strconv.QuoteRune(rune(d.s[d.i])))
}

// object reads a JSON object; d.s[d.i] is the opening brace.
func (d *jsonDecoder) object(depth int) (map[string]any, error) {
	d.i++
	m := map[string]any{}
	d.space()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.space()
		if d.i == len(d.s) || d.s[d.i] != '"' {
			return nil, d.errorf("want a string key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i == len(d.s) || d.s[d.i] != ':' {
			return nil, d.errorf("want ':'")
		}
		d.i++
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.space()
		if d.i == len(d.s) {
			return nil, d.errorf("unexpected end")
		}
		if d.s[d.i] == '}' {
			d.i++
			return m, nil
		}
		if d.s[d.i] != ',' {
			return nil, d.errorf("want ',' or '}'")
		}
		d.i++
	}
}

// array reads a JSON array; d.s[d.i] is the opening bracket.
func (d *jsonDecoder) array(depth int) ([]any, error) {
	d.i++
	l := []any{}
	d.space()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return l, nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		l = append(l, v)
		d.space()
		if d.i == len(d.s) {
			return nil, d.errorf("unexpected end")
		}
		if d.s[d.i] == ']' {
			d.i++
			return l, nil
		}
		if d.s[d.i] != ',' {
			return nil, d.errorf("want ',' or ']'")
		}
		d.i++
	}
}

// number reads a JSON number: an int64 when it is written as an integer
// that fits, else a float64.
func (d *jsonDecoder) number() (any, error) {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	intStart := d.i
	if n := digits(); n == 0 || n > 1 && d.s[intStart] == '0' {
		return nil, d.errorf("invalid number")
	}
	integer := true
	if d.i < len(d.s) && d.s[d.i] == '.' {
		d.i++
		integer = false
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		d.i++
		integer = false
		if d.i < len(d.s) && (d.s[d.i] == '+' || d.s[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	text := string(d.s[start:d.i])
	if integer {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, d.errorf("number out of range")
	}
	return f, nil
}

// str reads a JSON string; d.s[d.i] is the opening quote.
func (d *jsonDecoder) str() (string, error) {
	d.i++
	start := d.i
	// Fast path: no escapes.
	for d.i < len(d.s) {
		c := d.s[d.i]
		if c == '"' {
			s := d.str0[start:d.i]
			d.i++
			if !utf8.ValidString(s) {
				return "", d.errorf("invalid UTF-8 in a string")
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.i++
	}
	return d.escapedStr(start)
}

// escapedStr reads the rest of a string that has an escape (or a control
// character) at d.i; its text began at start.
func (d *jsonDecoder) escapedStr(start int) (string, error) {
	buf := append([]byte(nil), d.s[start:d.i]...)
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(buf) {
				return "", d.errorf("invalid UTF-8 in a string")
			}
			return string(buf), nil
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		d.i++
		if d.i == len(d.s) {
			break
		}
		var err error
		if buf, err = d.escape(buf); err != nil {
			return "", err
		}
	}
	return "", d.errorf("unterminated string")
}

// escape appends what the escape at d.i (just after its backslash) stands for.
func (d *jsonDecoder) escape(buf []byte) ([]byte, error) {
	e := d.s[d.i]
	d.i++
	switch e {
	case '"', '\\', '/':
		return append(buf, e), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, ok := d.hex4()
		if !ok {
			return buf, d.errorf("invalid \\u escape")
		}
		if utf16.IsSurrogate(r) {
			r = d.lowSurrogate(r)
		}
		return utf8.AppendRune(buf, r), nil
	}
	return buf, d.errorf("invalid escape")
}

// lowSurrogate reads the \u escape that completes a surrogate pair begun
// by hi and returns the pair's rune. Without one it reads nothing and
// returns utf8.RuneError.
func (d *jsonDecoder) lowSurrogate(hi rune) rune {
	if d.i+1 < len(d.s) && d.s[d.i] == '\\' && d.s[d.i+1] == 'u' {
		save := d.i
		d.i += 2
		if lo, ok := d.hex4(); ok {
			if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
				return r
			}
		}
		d.i = save
	}
	return utf8.RuneError
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if len(d.s)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.s[d.i : d.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

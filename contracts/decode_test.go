package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// manyKeys is an object with n keys k0… and then extra.
func manyKeys(n int, extra string) string {
	var b strings.Builder
	b.WriteString(`{`)
	for i := range n {
		b.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + `,`)
	}
	b.WriteString(extra + `}`)
	return b.String()
}

func TestCheckDuplicateKeysFindsRepeatedKeys(t *testing.T) {
	many := func(extra string) string {
		var b strings.Builder
		b.WriteString(`{"x":{`)
		for i := range 100 { // past the size from which keys go in a map
			b.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + `,`)
		}
		b.WriteString(extra + `}}`)
		return b.String()
	}
	cases := []struct {
		name, doc, path string
	}{
		{"top level", `{"decision":"reject","comment":"wrong account","decision":"approve"}`, "decision"},
		{"an object member", `{"run":{"id":"a"},"tool_calls":[],"run":{"id":"b"}}`, "run"},
		{"nested in arrays", `{"tool_calls":[{"id":"1","arguments":{"amount":1,"to":"x","amount":2}}]}`, "tool_calls[0].arguments.amount"},
		{"second element", `{"x":[{"a":1},{"a":1,"b":2,"a":3}]}`, "x[1].a"},
		{"top-level array", `[0,[{"a":1,"a":1}]]`, "[1][0].a"},
		{"escaped letter", `{"a":1,"\u0061":2}`, "a"},
		{"escaped solidus", `{"a/b":1,"a\/b":2}`, "a/b"},
		{"escaped both", `{"\u00e9":1,"\u00E9":2}`, "é"},
		{"raw and escaped non-ASCII", `{"é":1,"\u00e9":2}`, "é"},
		{"surrogate pair", `{"😀":1,"\ud83d\ude00":2}`, "😀"},
		{"lone surrogates read as U+FFFD", `{"\ud800":1,"\udfff":2}`, "\ufffd"},
		{"invalid UTF-8 reads as U+FFFD", "{\"\xff\":1,\"\xfe\":2}", "\ufffd"},
		{"invalid UTF-8 and its replacement", "{\"\xff\":1,\"\ufffd\":2}", "\ufffd"},
		{"empty key", `{"":1,"":2}`, ""},
		{"after whitespace", "{ \"a\" : 1 ,\n\t\"a\"\r: 2 }", "a"},
		{"many keys, repeated late", many(`"k39":0`), "x.k39"},
		{"many keys, repeated early", many(`"k0":0`), "x.k0"},
		{"many keys, escaped", many(`"\u006b17":0`), "x.k17"},
		{"after a closed inner object", `{"a":{"b":1,"c":{"d":1}},"e":[],"a":0}`, "a"},
		{"value after a duplicate is not read", `{"a":1,"a":` + "\x00", "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := contracts.CheckDuplicateKeys([]byte(tc.doc))
			var dup *contracts.DuplicateKeyError
			if !errors.As(err, &dup) {
				t.Fatalf("CheckDuplicateKeys(%q) = %v, want a duplicate key error", tc.doc, err)
			}
			if dup.Path != tc.path {
				t.Errorf("path %q, want %q", dup.Path, tc.path)
			}
			if !errors.Is(err, contracts.ErrDuplicateKey) || !errors.Is(err, contracts.ErrInvalidJSON) {
				t.Errorf("%v does not match ErrDuplicateKey and ErrInvalidJSON", err)
			}
			if dup.Offset <= 0 || dup.Offset >= len(tc.doc) || tc.doc[dup.Offset] != '"' {
				t.Errorf("offset %d is not a key's opening quote", dup.Offset)
			}
		})
	}
}

func TestCheckDuplicateKeysAcceptsDistinctKeys(t *testing.T) {
	for _, doc := range []string{
		`{}`, `[]`, `""`, `0`, `-0.5e+10`, `1E-2`, `true`, `false`, `null`, ` {"a" : [ ] } `,
		`{"a":{"a":{"a":1}}}`,
		`[{"a":1},{"a":2}]`,
		`{"a":1,"A":2}`,
		`{"a":1,"a ":2,"\u0061b":3}`,
		`{"\ud83d\ude00":1,"\ud83d":2}`,
		`{"x":{"a":1},"y":{"a":1}}`,
		`{"a":"\"a\"","b":"\\","c":"\/\b\f\n\r\t\u0000"}`,
		"{\"é\":\"\xff\"}",
		manyKeys(100, `"k100":{"k0":0,"k1":1},"k101":[{"k0":0}]`),
	} {
		if err := contracts.CheckDuplicateKeys([]byte(doc)); err != nil {
			t.Errorf("CheckDuplicateKeys(%q) = %v", doc, err)
		}
	}
}

func TestCheckDuplicateKeysRefusesWhatIsNotJSON(t *testing.T) {
	for _, doc := range []string{
		``, ` `, `{`, `}`, `[`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1}{}`, `{"a":1} x`, `[1 2]`,
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `tru`, `nul`, `falsey`, `NaN`,
		`"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"a\x01\"", `"\`, `{"a":"b`, `{"a`, `[` + strings.Repeat(`"`, 3),
		"\ufeff{}", `{"a":1,"b"}`, `{,}`, `[,1]`,
	} {
		err := contracts.CheckDuplicateKeys([]byte(doc))
		if err == nil || !errors.Is(err, contracts.ErrInvalidJSON) || errors.Is(err, contracts.ErrDuplicateKey) {
			t.Errorf("CheckDuplicateKeys(%q) = %v, want an invalid JSON error", doc, err)
		}
		if json.Valid([]byte(doc)) {
			t.Errorf("encoding/json accepts %q", doc)
		}
	}
}

func TestCheckDuplicateKeysNestingLimit(t *testing.T) {
	deep := func(n int) []byte {
		return []byte(strings.Repeat(`[{"a":`, n) + "1" + strings.Repeat(`}]`, n))
	}
	// encoding/json's limit is 10000 levels; the checker's is the same.
	for _, n := range []int{4999, 5000, 5001} {
		err := contracts.CheckDuplicateKeys(deep(n))
		if (err == nil) != json.Valid(deep(n)) {
			t.Errorf("%d levels: checker %v, json.Valid %v", 2*n, err, json.Valid(deep(n)))
		}
	}
	if err := contracts.CheckDuplicateKeys(deep(5001)); err == nil {
		t.Error("10002 levels accepted")
	}
	if err := contracts.CheckDuplicateKeys(deep(5000)); err != nil {
		t.Errorf("10000 levels: %v", err)
	}
}

type decodeVote struct {
	Decision string          `json:"decision"`
	Comment  string          `json:"comment"`
	Args     json.RawMessage `json:"arguments"`
}

func TestDecode(t *testing.T) {
	var v decodeVote
	err := contracts.Decode([]byte(`{"decision":"reject","comment":"wrong account","decision":"approve"}`), &v)
	var dup *contracts.DuplicateKeyError
	if !errors.As(err, &dup) || dup.Path != "decision" {
		t.Fatalf("Decode: %v", err)
	}
	if v.Decision != "" || v.Comment != "" {
		t.Errorf("a refused document was decoded: %+v", v)
	}
	if err := contracts.Decode([]byte(`{"decision":"approve","arguments":{"a":1,"a":2}}`), &v); !errors.As(err, &dup) || dup.Path != "arguments.a" {
		t.Errorf("duplicate inside raw arguments: %v", err)
	}

	var syn *json.SyntaxError
	if err := contracts.Decode([]byte(`{"decision":`), &v); !errors.As(err, &syn) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated input: %v (%T), want encoding/json's error", err, err)
	}
	if err := contracts.Decode([]byte(`{"decision": x}`), &v); !errors.As(err, &syn) {
		t.Errorf("malformed input: %v (%T), want a *json.SyntaxError", err, err)
	}
	var typ *json.UnmarshalTypeError
	if err := contracts.Decode([]byte(`{"decision": 1}`), &v); !errors.As(err, &typ) {
		t.Errorf("wrong type: %v", err)
	}

	if err := contracts.Decode([]byte(`{"decision":"approve","new_field":{"x":1}}`), &v); err != nil || v.Decision != "approve" {
		t.Errorf("unknown field: %v, %+v", err, v)
	}
	if err := contracts.DecodeStrict([]byte(`{"decision":"approve","new_field":1}`), &v); err == nil {
		t.Error("DecodeStrict accepted an unknown field")
	}
	if err := contracts.DecodeStrict([]byte(`{"decision":"reject","arguments":{"b":[1]}}`), &v); err != nil ||
		v.Decision != "reject" || string(v.Args) != `{"b":[1]}` {
		t.Errorf("DecodeStrict: %v, %+v", err, v)
	}
	if err := contracts.DecodeStrict([]byte(`{"decision":"reject","decision":"approve"}`), &v); !errors.As(err, &dup) {
		t.Errorf("DecodeStrict duplicate: %v", err)
	}
}

// referenceDuplicate finds the first repeated key with encoding/json's
// token reader: slow, and obviously right.
func referenceDuplicate(data []byte) (path string, found bool) {
	type level struct {
		object bool
		keys   map[string]bool
		key    string
		index  int
		want   bool // object: the next string token is a key
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers beyond float64 are still JSON
	var stack []*level
	pathOf := func() string {
		var b strings.Builder
		for i, l := range stack {
			if l.object {
				if i > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			} else {
				b.WriteString("[" + strconv.Itoa(l.index) + "]")
			}
		}
		return b.String()
	}
	// valueDone advances the innermost container past a value.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if l := stack[len(stack)-1]; l.object {
			l.want = true
		} else {
			l.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		if len(stack) > 0 {
			if l := stack[len(stack)-1]; l.object && l.want {
				if k, ok := tok.(string); ok {
					if l.keys[k] {
						l.key = k
						return pathOf(), true
					}
					l.keys[k], l.key, l.want = true, k, false
					continue
				}
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{object: true, keys: map[string]bool{}, want: true})
		case json.Delim('['):
			stack = append(stack, &level{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// FuzzCheckDuplicateKeys holds the checker to encoding/json: it accepts
// exactly the documents json.Valid accepts that repeat no key, and names
// the same first repeated key as a token-by-token reading does.
func FuzzCheckDuplicateKeys(f *testing.F) {
	for _, s := range []string{
		`{"decision":"reject","comment":"wrong account","decision":"approve"}`,
		`{"run":{"id":"a"},"run":{"id":"b"}}`,
		`{"tool_calls":[{"arguments":{"amount":1,"amount":2}}]}`,
		`{"a":1,"\u0061":2}`, `{"\ud800":1,"\udfff":2}`, "{\"\xff\":1,\"\xfe\":2}", `{"a":{"a":1}}`,
		`[{"a":1},{"a":2}]`, `{"a":[1,{"b":2}],"c":"\"\\\/"}`, `{"a":1,"A":2}`, `-0.0e-0`, ` [ ] `,
		manyKeys(70, `"k3":0`), manyKeys(70, `"k70":{"k0":0}`),
		`{"a":1,}`, `[1,]`, `"\u12"`, `01`, `{"a":1}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := contracts.CheckDuplicateKeys(data)
		valid := json.Valid(data)
		if !valid {
			if err == nil {
				t.Fatalf("accepted %q, which encoding/json refuses", data)
			}
			if !errors.Is(err, contracts.ErrInvalidJSON) {
				t.Fatalf("error %v does not match ErrInvalidJSON", err)
			}
			return
		}
		path, dup := referenceDuplicate(data)
		var got *contracts.DuplicateKeyError
		switch {
		case dup && !errors.As(err, &got):
			t.Fatalf("%q repeats %q, checker says %v", data, path, err)
		case dup && got.Path != path:
			t.Fatalf("%q: checker names %q, reference %q", data, got.Path, path)
		case !dup && err != nil:
			t.Fatalf("%q refused: %v", data, err)
		}
		var v json.RawMessage
		if derr := contracts.Decode(data, &v); (derr == nil) != (err == nil) {
			t.Fatalf("Decode %v, checker %v", derr, err)
		}
	})
}

// I-JSON (RFC 7493): integers beyond ±(2^53−1) are refused with their
// path; the largest safe ones, and numbers written with a fraction or an
// exponent, pass.
func TestCheckIJSONRefusesUnsafeIntegers(t *testing.T) {
	for _, ok := range []string{`9007199254740991`, `-9007199254740991`, `{"a":[1e300,0.5,-0]}`, `{"n":900719925474099}`} {
		if err := contracts.CheckIJSON([]byte(ok)); err != nil {
			t.Errorf("CheckIJSON(%s): %v", ok, err)
		}
	}
	for doc, path := range map[string]string{
		`9007199254740992`:                   "",
		`{"to_account":12345678901234567}`:   "to_account",
		`{"a":[0,{"b":-90071992547409910}]}`: "a[1].b",
	} {
		var big *contracts.UnsafeIntegerError
		err := contracts.CheckIJSON([]byte(doc))
		if !errors.As(err, &big) || big.Path != path || !errors.Is(err, contracts.ErrInvalidJSON) {
			t.Errorf("CheckIJSON(%s): %v, want an unsafe integer at %q", doc, err, path)
		}
		if err := contracts.CheckDuplicateKeys([]byte(doc)); err != nil {
			t.Errorf("CheckDuplicateKeys(%s) refuses it too: %v (stored records must stay readable)", doc, err)
		}
	}
}

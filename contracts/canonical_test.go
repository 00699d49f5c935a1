package contracts_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

func mustCanonicalize(t *testing.T, in string) string {
	t.Helper()
	out, err := contracts.Canonicalize([]byte(in))
	if err != nil {
		t.Fatalf("Canonicalize(%q): unexpected error: %v", in, err)
	}
	return string(out)
}

// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
func TestCanonicalizeNumbersAppendixB(t *testing.T) {
	vectors := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, v := range vectors {
		f := math.Float64frombits(v.bits)
		literal, err := json.Marshal(f)
		if err != nil {
			t.Fatalf("%016x: json.Marshal: %v", v.bits, err)
		}
		got := mustCanonicalize(t, string(literal))
		if got != v.want {
			t.Errorf("%016x (input %s): got %s, want %s", v.bits, literal, got, v.want)
		}
		// The canonical text must denote the same double.
		var back float64
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatalf("%016x: canonical %s does not parse: %v", v.bits, got, err)
		}
		if back != f {
			t.Errorf("%016x: canonical %s parses to %v, want %v", v.bits, got, back, f)
		}
	}
}

func TestCanonicalizeNumberLiterals(t *testing.T) {
	cases := []struct{ in, want string }{
		{"0", "0"},
		{"-0", "0"},
		{"-0.0", "0"},
		{"0e10", "0"},
		{"1", "1"},
		{"-1", "-1"},
		{"1.0", "1"},
		{"4.50", "4.5"},
		{"1E30", "1e+30"},
		{"2e-3", "0.002"},
		{"1e-6", "0.000001"},
		{"1e-7", "1e-7"},
		{"1.5e-7", "1.5e-7"},
		{"-1.5e-7", "-1.5e-7"},
		{"0.000000000000000000000000001", "1e-27"},
		{"1e20", "100000000000000000000"},
		{"1e21", "1e+21"},
		{"12345678901234567890", "12345678901234567000"},
		{"123456789012345678901234567890", "1.2345678901234568e+29"},
		{"333333333.33333329", "333333333.3333333"},
		{"9007199254740993", "9007199254740992"},
		{"0.1", "0.1"},
		{"100", "100"},
		{"123.456", "123.456"},
		{"1E+2", "100"},
		{"1e-400", "0"},
		{"-1e-400", "0"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"4.9e-324", "5e-324"},
	}
	for _, c := range cases {
		if got := mustCanonicalize(t, c.in); got != c.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// The example of RFC 8785 §3.2.2 and §3.2.3 (values.json in the RFC's test data).
func TestCanonicalizeRFCExample(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	if got := mustCanonicalize(t, in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// Property sorting by UTF-16 code units, RFC 8785 §3.2.3.
func TestCanonicalizeKeySorting(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := "{" +
		`"\r":"Carriage Return",` +
		`"1":"One",` +
		"\"\u0080\":\"Control\"," +
		"\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
		"\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\"," +
		"\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"" +
		"}"
	got := mustCanonicalize(t, in)
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// The emoji (a surrogate pair in UTF-16) sorts before U+FB33 even
	// though its code point is larger.
	if strings.Index(got, "\U0001F600") > strings.Index(got, "\ufb33") {
		t.Errorf("U+1F600 must sort before U+FB33 by UTF-16 code units: %s", got)
	}
}

// The remaining inputs of the RFC 8785 reference test data.
func TestCanonicalizeReferenceData(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{
			name: "arrays",
			in:   "[\n  56,\n  {\n    \"d\": true,\n    \"10\": null,\n    \"1\": [ ]\n  }\n]",
			want: `[56,{"1":[],"10":null,"d":true}]`,
		},
		{
			name: "structures",
			in:   "{\n  \"1\": {\"f\": {\"f\": \"hi\",\"F\": 5} ,\"\\n\": 56.0},\n  \"10\": { },\n  \"\": \"empty\",\n  \"a\": { },\n  \"111\": [ { } ],\n  \"A\": { }\n}",
			want: `{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{}],"A":{},"a":{}}`,
		},
		{
			name: "french",
			in:   "{\n  \"peach\": \"This sorting order\",\n  \"péché\": \"is wrong according to French\",\n  \"pêche\": \"but canonicalization MUST\",\n  \"sin\":   \"ingnore locale\"\n}\n",
			want: `{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ingnore locale"}`,
		},
		{
			name: "unicode is not normalized",
			in:   "{\n  \"Unnormalized Unicode\":\"\\u1e0d\\u0307\"\n}\n",
			want: "{\"Unnormalized Unicode\":\"\u1e0d\u0307\"}",
		},
		{
			name: "weird",
			in:   "{\n  \"\\u20ac\": \"Euro Sign\",\n  \"1\": \"One\",\n  \"\\u0080\": \"Control\\u007f\",\n  \"\\ud83d\\ude02\": \"Smiley\",\n  \"\\u00f6\": \"Latin Small Letter O With Diaeresis\",\n  \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\",\n  \"</script>\": \"Browser Challenge\"\n}\n",
			want: "{\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u0080\":\"Control\u007f\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F602\":\"Smiley\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mustCanonicalize(t, c.in); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCanonicalizeStrings(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", `"hello"`, `"hello"`},
		{"empty", `""`, `""`},
		{"short escapes", `"\b\f\n\r\t\"\\"`, `"\b\f\n\r\t\"\\"`},
		{"other controls lowercase hex", `"\u0000\u0001\u001F\u000B"`, `"\u0000\u0001\u001f\u000b"`},
		{"solidus literal", `"a\/b/c"`, `"a/b/c"`},
		{"DEL literal", `"\u007f"`, "\"\x7f\""},
		{"line separators literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"escaped non-ASCII literal", `"\u00e9\u4E2D"`, "\"\u00e9\u4e2d\""},
		{"raw UTF-8 kept", "\"caf\u00e9 \U0001F600\"", "\"caf\u00e9 \U0001F600\""},
		{"surrogate pair", `"\uD83D\uDE00"`, "\"\U0001F600\""},
		{"replacement character", `"\ufffd"`, "\"\ufffd\""},
		{"html not escaped", `"<a href='x'>&amp;</a>"`, `"<a href='x'>&amp;</a>"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mustCanonicalize(t, c.in); got != c.want {
				t.Errorf("Canonicalize(%s) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestCanonicalizeNested(t *testing.T) {
	cases := []struct{ in, want string }{
		{`null`, `null`},
		{` true `, `true`},
		{"\t\r\n false \n", `false`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{`[ [ [ ] ] , { } ]`, `[[[]],{}]`},
		{
			`{"z": {"y": [3, {"b": 1, "a": [true, null]}], "x": "s"}, "a": []}`,
			`{"a":[],"z":{"x":"s","y":[3,{"a":[true,null],"b":1}]}}`,
		},
		{
			`{"tool": "deploy", "args": {"replicas": 3.0, "env": "prod", "tags": ["b", "a"]}}`,
			`{"args":{"env":"prod","replicas":3,"tags":["b","a"]},"tool":"deploy"}`,
		},
		// The same key may appear in different objects.
		{`[{"a": 1}, {"a": 2}]`, `[{"a":1},{"a":2}]`},
		{`{"a": {"a": {"a": 1}}}`, `{"a":{"a":{"a":1}}}`},
		// Keys are compared after their escapes are decoded.
		{`{"\u0061b": 1, "aa": 2}`, `{"aa":2,"ab":1}`},
	}
	for _, c := range cases {
		if got := mustCanonicalize(t, c.in); got != c.want {
			t.Errorf("Canonicalize(%s)\n got  %s\n want %s", c.in, got, c.want)
		}
	}
}

func TestCanonicalizeErrors(t *testing.T) {
	cases := []struct{ name, in string }{
		{"empty", ``},
		{"whitespace only", "  \n"},
		{"truncated object", `{"a": 1`},
		{"truncated array", `[1, 2`},
		{"trailing comma in object", `{"a": 1,}`},
		{"trailing comma in array", `[1,]`},
		{"missing colon", `{"a" 1}`},
		{"unquoted key", `{a: 1}`},
		{"single quotes", `{'a': 1}`},
		{"trailing garbage", `{"a": 1} x`},
		{"two values", `1 2`},
		{"trailing bracket", `[1]]`},
		{"bad literal", `tru`},
		{"capitalised literal", `True`},
		{"NaN", `NaN`},
		{"Infinity", `-Infinity`},
		{"leading zero", `01`},
		{"leading plus", `+1`},
		{"bare dot", `.5`},
		{"dot without fraction", `1.`},
		{"exponent without digits", `1e`},
		{"exponent sign without digits", `1e+`},
		{"hex number", `0x10`},
		{"number too large", `1e400`},
		{"negative number too large", `-1e400`},
		{"number too large in array", `[1, 2e308]`},
		{"duplicate key", `{"a": 1, "a": 2}`},
		{"duplicate key after escape decoding", `{"a": 1, "\u0061": 2}`},
		{"nested duplicate key", `{"x": [{"k": 1, "k": 1}]}`},
		{"lone high surrogate", `"\ud800"`},
		{"lone high surrogate then text", `"\ud800abcdef"`},
		{"high surrogate then non-surrogate escape", `"\ud800\u0041"`},
		{"high surrogate pair of highs", `"\ud800\ud800"`},
		{"lone low surrogate", `"\udc00"`},
		{"lone surrogate in key", `{"\udfff": 1}`},
		{"invalid UTF-8", "\"\xff\""},
		{"truncated UTF-8", "\"\xe2\x82\""},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\""},
		{"overlong UTF-8", "\"\xc0\xaf\""},
		{"raw control character", "\"a\nb\""},
		{"raw tab", "\"a\tb\""},
		{"unterminated string", `"abc`},
		{"bad escape", `"\x41"`},
		{"short unicode escape", `"\u12"`},
		{"non-hex unicode escape", `"\u12g4"`},
		{"byte order mark", "\ufeff{}"},
		{"comment", `{} // note`},
		{"too deep", strings.Repeat("[", 20000) + strings.Repeat("]", 20000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := contracts.Canonicalize([]byte(c.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want an error", c.in, out)
			}
			if !errors.Is(err, contracts.ErrInvalidJSON) {
				t.Errorf("error %v does not wrap ErrInvalidJSON", err)
			}
			if out != nil {
				t.Errorf("output %q returned along with error", out)
			}
			if _, err := contracts.ArgumentsSHA256([]byte(c.in)); c.in != "" && !errors.Is(err, contracts.ErrInvalidJSON) {
				t.Errorf("ArgumentsSHA256: error %v does not wrap ErrInvalidJSON", err)
			}
		})
	}
}

func TestCanonicalizeErrorMessages(t *testing.T) {
	cases := []struct{ in, mention string }{
		{`{"a": 1, "a": 2}`, "duplicate"},
		{`"\ud800"`, "surrogate"},
		{`1e400`, "range"},
		{`{} x`, "after top-level value"},
		{"\"\xff\"", "UTF-8"},
	}
	for _, c := range cases {
		_, err := contracts.Canonicalize([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("Canonicalize(%q) error = %v, want one mentioning %q", c.in, err, c.mention)
		}
	}
}

func TestCanonicalizeIdempotent(t *testing.T) {
	inputs := []string{
		`{"b": [1.50, -0, 1e21, 1e-7, "x\u0001"], "a": {"d": null, "c": true}}`,
		`{"\u20ac": 1, "\ud83d\ude00": 2, "\ufb33": 3, "\r": 4}`,
		`[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]`,
		`"\u2028\/\\\""`,
		`[[[{}]]]`,
		`-5e-324`,
	}
	for _, in := range inputs {
		once := mustCanonicalize(t, in)
		twice := mustCanonicalize(t, once)
		if once != twice {
			t.Errorf("not idempotent for %s:\n once  %s\n twice %s", in, once, twice)
		}
	}
}

func TestArgumentsSHA256(t *testing.T) {
	sumHex := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	mustHash := func(args string) string {
		t.Helper()
		h, err := contracts.ArgumentsSHA256([]byte(args))
		if err != nil {
			t.Fatalf("ArgumentsSHA256(%q): %v", args, err)
		}
		return h
	}

	want := sumHex(`{"a":1,"b":2}`)
	if got := mustHash(`{"b":2,"a":1}`); got != want {
		t.Errorf(`ArgumentsSHA256({"b":2,"a":1}) = %s, want %s`, got, want)
	}
	for _, variant := range []string{
		`{"a":1,"b":2}`,
		`{ "a" : 1 , "b" : 2 }`,
		"{\n\t\"b\": 2.0,\n\t\"a\": 1e0\n}\n",
		`{"\u0062":2,"a":10e-1}`,
	} {
		if got := mustHash(variant); got != want {
			t.Errorf("ArgumentsSHA256(%q) = %s, want %s", variant, got, want)
		}
	}
	if mustHash(`{"a":1,"b":3}`) == want {
		t.Error("different arguments produced the same hash")
	}

	emptyObject := sumHex(`{}`)
	for _, args := range [][]byte{nil, {}, []byte(`{}`), []byte(" { } ")} {
		h, err := contracts.ArgumentsSHA256(args)
		if err != nil {
			t.Fatalf("ArgumentsSHA256(%q): %v", args, err)
		}
		if h != emptyObject {
			t.Errorf("ArgumentsSHA256(%q) = %s, want hash of {} %s", args, h, emptyObject)
		}
	}

	if h := mustHash(`{}`); len(h) != 64 || strings.ToLower(h) != h {
		t.Errorf("hash %q is not 64 lowercase hex digits", h)
	}
}

func FuzzCanonicalize(f *testing.F) {
	seeds := []string{
		`{"b":2,"a":1}`,
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`[1e21,1e-7,-0,5e-324,1.7976931348623157e308]`,
		`"\ud800"`,
		`{"a":1,"a":2}`,
		`1e400`,
		`[[[[{"x":[]}]]]]`,
		"\"\xff\"",
		`{"a":"\u2028"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := contracts.Canonicalize(in)
		if err != nil {
			if !errors.Is(err, contracts.ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted input that is not JSON: %q", in)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %q (input %q)", out, in)
		}
		again, err := contracts.Canonicalize(out)
		if err != nil {
			t.Fatalf("canonical output %q rejected: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n input %q\n once  %q\n twice %q", in, out, again)
		}
		// Canonicalization preserves the data model.
		var before, after any
		if err := json.Unmarshal(in, &before); err != nil {
			t.Fatalf("encoding/json rejects accepted input %q: %v", in, err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("encoding/json rejects output %q: %v", out, err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("value changed:\n input  %q -> %#v\n output %q -> %#v", in, before, out, after)
		}
	})
}

// CanonicalSHA256 of Canonicalize's output is ArgumentsSHA256 of the
// input: the canonical form is its own canonical form.
func TestCanonicalSHA256OfCanonicalFormMatchesArgumentsSHA256(t *testing.T) {
	for _, in := range []string{
		`{}`,
		`{"b":2,"a":1}`,
		`{ "amount" : 1.50, "memo": "caf\u00e9 <b>&</b>", "n": 1E3, "list": [3, 2, {"z": null, "y": true}] }`,
		`{"\u20ac":"\ud83d\ude00","a\nb":-0,"big":1e21,"small":1e-7}`,
	} {
		canon, err := contracts.Canonicalize([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		want, err := contracts.ArgumentsSHA256([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := contracts.CanonicalSHA256(canon); got != want {
			t.Errorf("%s: CanonicalSHA256 %s, ArgumentsSHA256 %s", in, got, want)
		}
	}
}

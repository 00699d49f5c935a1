package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]any
		err  string
	}{
		{``, map[string]any{}, ""},
		{`  `, map[string]any{}, ""},
		{`null`, map[string]any{}, ""},
		{`{}`, map[string]any{}, ""},
		{` {"a" : 1 , "b":[ ]} `, map[string]any{"a": int64(1), "b": []any{}}, ""},
		{`{"i": 250, "f": 250.5, "e": 1e2, "n": -3, "z": -0, "big": 9223372036854775808, "tiny": 1E-3}`,
			map[string]any{"i": int64(250), "f": 250.5, "e": 100.0, "n": int64(-3), "z": int64(0), "big": 9223372036854775808.0, "tiny": 0.001}, ""},
		{`{"s": "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00", "lone": "\ud800x"}`,
			map[string]any{"s": "a\"b\\c/d\b\f\n\r\té😀", "lone": "\uFFFDx"}, ""},
		{`{"nested": {"l": [true, false, null, {"x": "y"}]}}`,
			map[string]any{"nested": map[string]any{"l": []any{true, false, nil, map[string]any{"x": "y"}}}}, ""},
		{`{"dup": 1, "dup": 2}`, map[string]any{"dup": int64(2)}, ""},
		{`[1]`, nil, "not a JSON object"},
		{`"s"`, nil, "not a JSON object"},
		{`null x`, nil, "not a JSON object"},
		{`{"a": 1} x`, nil, "data after the object"},
		{`{"a": 1`, nil, "unexpected end"},
		{`{"a" 1}`, nil, "want ':'"},
		{`{a: 1}`, nil, "want a string key"},
		{`{"a": 01}`, nil, "invalid number"},
		{`{"a": 1.}`, nil, "invalid number"},
		{`{"a": -}`, nil, "invalid number"},
		{`{"a": 1e}`, nil, "invalid number"},
		{`{"a": 1e999}`, nil, "out of range"},
		{`{"a": tru}`, nil, "unexpected character"},
		{`{"a": "x` + "\n" + `"}`, nil, "control character"},
		{`{"a": "\x"}`, nil, "invalid escape"},
		{`{"a": "\u12"}`, nil, "invalid \\u escape"},
		{`{"a": "` + "\xff" + `"}`, nil, "invalid UTF-8"},
		{`{"a": [1, 2}`, nil, "want ',' or ']'"},
		{`{"a": 1,}`, nil, "want a string key"},
		{strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 300), nil, "nested too deeply"},
	}
	for _, tt := range tests {
		got, err := decodeArgs([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("decodeArgs(%q) error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("decodeArgs(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzDecodeArgs checks decodeArgs against encoding/json: the same inputs
// are accepted (valid UTF-8 aside, which encoding/json repairs and we
// refuse) and decode to the same values, integers as int64.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, 2.5, "x", null, true, {"b": -1e3}]}`, `{"s": "\u00e9\ud800"}`, `[1]`, `{"a": 1} 2`, `{"a":9223372036854775807}`, `{"a":-9223372036854775809}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeArgs(data)
		trimmed := bytes.Trim(data, " \t\r\n") // JSON whitespace
		if len(trimmed) == 0 || string(trimmed) == "null" {
			if err != nil || len(got) != 0 {
				t.Fatalf("empty: %v %v", got, err)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var ref map[string]any
		refErr := dec.Decode(&ref)
		if refErr == nil {
			if _, e := dec.Token(); !errors.Is(e, io.EOF) {
				refErr = errArgsNotObject // trailing data
			}
		}
		if refErr == nil && (trimmed[0] != '{') {
			refErr = errArgsNotObject
		}
		if refErr != nil {
			if err == nil {
				t.Fatalf("decodeArgs accepted %q, encoding/json: %v", data, refErr)
			}
			return
		}
		if err != nil {
			if !utf8.Valid(data) || strings.Contains(err.Error(), "out of range") || strings.Contains(err.Error(), "nested too deeply") {
				return
			}
			t.Fatalf("decodeArgs refused %q (%v), encoding/json accepted it", data, err)
		}
		want, ok := convertNumbers(ref).(map[string]any)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeArgs(%q) = %#v, encoding/json %#v", data, got, want)
		}
	})
}

// convertNumbers turns json.Number into int64 or float64 as decodeArgs
// does.
func convertNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil && !strings.ContainsAny(string(v), ".eE") {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = convertNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = convertNumbers(e)
		}
	}
	return v
}

func BenchmarkDecodeArgs(b *testing.B) {
	raw := []byte(`{"amount":250,"currency":"EUR","recipient":"ACME GmbH","reference":"INV-2026-0042"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeArgs(raw); err != nil {
			b.Fatal(err)
		}
	}
}

package inbox

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/notifier"
)

// How the inbox shows times, numbers and argument values to people: one
// timestamp format with its time zone (2026-11-27 14:05 UTC) and the
// exact instant for machines; numbers with thousands separators; strings
// in quotes, so that "250" does not read as the number 250.

// stampLayout is the one format of timestamps on the inbox's pages.
const stampLayout = "2006-01-02 15:04 UTC"

// moment is a point in time as a page shows it: Text for people, ISO (RFC
// 3339) for the <time> element's datetime, and Rel, how long ago or how far
// off it is ("5m ago", "in 2h00m"), where that helps.
type moment struct {
	Text, ISO, Rel string
}

func momentOf(t time.Time) moment {
	if t.IsZero() {
		return moment{}
	}
	u := t.UTC()
	return moment{Text: u.Format(stampLayout), ISO: u.Format(time.RFC3339)}
}

// momentAgo is t with how long before now it was.
func momentAgo(now, t time.Time) moment {
	m := momentOf(t)
	if m.Text != "" {
		m.Rel = ago(now, t)
	}
	return m
}

// momentUntil is t with how far after now it is.
func momentUntil(now, t time.Time) moment {
	m := momentOf(t)
	if m.Text != "" {
		m.Rel = until(now, t)
	}
	return m
}

// thousands writes a decimal number with a comma every three digits of its
// integer part: 12500 → 12,500, -1234567.5 → -1,234,567.5. Anything else
// (an exponent, not a number) is returned as it is.
func thousands(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || strings.ContainsFunc(whole, func(r rune) bool { return r < '0' || r > '9' }) ||
		strings.ContainsAny(frac, "eE+-") {
		return sign + s
	}
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return sign + b.String()
}

// count is an integer as a page shows it.
func count(n int) string { return thousands(strconv.Itoa(n)) }

// Kinds of argument values, as argField.Kind says them.
const (
	kindText   = "text"
	kindNumber = "number"
	kindOther  = "json"
)

// argField is one top-level argument as a page shows it: Value in quotes
// for a string, with thousands separators for a number, as JSON for the
// rest; long values fold away.
type argField struct {
	Key   string
	Value string
	Kind  string
	Long  bool
}

// longArgument is the size from which an argument's value folds away.
const longArgument = 160

func argValue(key string, raw json.RawMessage) argField {
	f := argField{Key: key, Kind: kindOther}
	var s string
	switch {
	case json.Unmarshal(raw, &s) == nil:
		f.Kind = kindText
		f.Long = len(s) > longArgument || strings.Contains(s, "\n")
		if f.Long {
			f.Value = s // folded away under a summary that says it is text
		} else {
			f.Value = `"` + s + `"`
		}
	case isNumber(raw):
		f.Kind, f.Value = kindNumber, thousands(string(bytes.TrimSpace(raw)))
	default:
		f.Value = notifier.FormatJSON(raw, 0)
		f.Long = len(f.Value) > longArgument || strings.Contains(f.Value, "\n")
	}
	return f
}

func isNumber(raw json.RawMessage) bool {
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(&n) == nil
}

// argumentFields are the top-level arguments of a JSON object, by key.
func argumentFields(raw json.RawMessage) []argField {
	m, ok := argumentMap(raw)
	if !ok {
		return nil
	}
	out := make([]argField, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, argValue(k, m[k]))
	}
	return out
}

func argumentMap(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// argChange is one top-level argument an edit changed: Old is absent for
// an added key, New for a removed one.
type argChange struct {
	Key      string
	Old, New *argField
}

// argumentChanges are the top-level arguments that differ between the
// requested and the edited arguments, by key.
func argumentChanges(requested, edited json.RawMessage) []argChange {
	a, _ := argumentMap(requested)
	b, _ := argumentMap(edited)
	keys := sortedKeys(a)
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []argChange
	for _, k := range keys {
		va, inA := a[k]
		vb, inB := b[k]
		if inA && inB && sameJSON(va, vb) {
			continue
		}
		c := argChange{Key: k}
		if inA {
			f := argValue(k, va)
			c.Old = &f
		}
		if inB {
			f := argValue(k, vb)
			c.New = &f
		}
		out = append(out, c)
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value, whatever the
// order of their keys.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

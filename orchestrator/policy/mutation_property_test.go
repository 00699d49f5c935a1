package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestShippedPoliciesNeverWeakerWhenMutated is the property behind "a
// condition that errors gates with the strictest settings": for every
// example policy in deploy/policies and every well-typed call in its cases
// (one whose decision has no condition error), no mutation of the
// arguments gets a weaker gate (weakerThan) than the call itself:
//
//   - type: each value (at any depth) replaced by one of every other JSON
//     type: a number by its text, a string by the number it spells (else 0
//     and 1), true and false, null, {} and {"value": v}, [] and [v];
//   - unicode: each string in full-width forms, upper and lower case, and
//     with a zero-width joiner or a combining acute accent at each place
//     (a seeded sample of places in long strings);
//   - deep: a dummy field nested 10,000 deep, and each field wrapped
//     10,000 deep;
//   - removed: each object member removed;
//   - huge: each number replaced by ±(2^53−1) and ±1e300.
//
// Type, unicode and deep mutations never make a well-typed call, so they
// are held to it whatever the policy says. A removed member or a huge
// number can make another well-typed call (a policy that reads
// args.?cc.orValue([]) says what a mail without cc is; a refund of an
// original payment of 2^53−1 is within it), which the policy decides on its
// own merits: those are held to the call only when a condition errored.
// Explain decides every mutated call as Evaluate does.
func TestShippedPoliciesNeverWeakerWhenMutated(t *testing.T) {
	files, err := filepath.Glob("../../deploy/policies/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(20261123, 5))
	total := 0
	for _, file := range files {
		if strings.HasSuffix(file, ".cases.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			p, err := Load(file)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".cases.yaml")
			if err != nil {
				t.Fatal(err)
			}
			cases, err := ParseCases(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				in := Input{Run: c.Run, Tool: c.Tool, Arguments: c.Arguments}
				want := p.Evaluate(in)
				if want.Error != "" {
					continue // not a well-typed call
				}
				for _, m := range mutations(t, c.Arguments, rng) {
					total++
					in.Arguments = m.args
					got := p.Evaluate(in)
					if e, _ := p.Explain(in); !reflect.DeepEqual(e, got) {
						t.Errorf("case %q, %s: Explain decided %+v, Evaluate %+v", c.Name, m.what, e, got)
					}
					if got.Error != "" && got.Action == ActionAllow {
						t.Errorf("case %q, %s: a condition errored (%s) and the call is allowed", c.Name, m.what, got.Error)
					}
					if !m.always && got.Error == "" {
						continue
					}
					if weaker := got.weakerThan(want); len(weaker) > 0 {
						t.Errorf("case %q, %s: rule %s (%s, error %q) is weaker than the call's rule %s (%s): %s",
							c.Name, m.what, got.Rule, verdictWhy(got), got.Error, want.Rule, verdictWhy(want), strings.Join(weaker, "; "))
					}
				}
			}
		})
	}
	t.Logf("%d mutated calls", total)
}

// mutation is one changed argument object; always says whether it is held
// to the call's gate whether or not a condition errored.
type mutation struct {
	what   string
	args   json.RawMessage
	always bool
}

const deepNesting = 10000

// mutations lists the mutations of a JSON object (see
// TestShippedPoliciesNeverWeakerWhenMutated).
func mutations(t *testing.T, raw json.RawMessage, rng *rand.Rand) []mutation {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("arguments %s: %v", raw, err)
	}
	var out []mutation
	add := func(what string, v any, always bool) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = append(out, mutation{what: what, args: b, always: always})
	}
	walk(root, "", func(ptr string, v any) {
		if ptr == "" {
			return
		}
		if isMember(root, ptr) {
			add("removed "+ptr, replaceAt(root, ptr, func(any) (any, bool) { return nil, false }), false)
		}
		for _, r := range otherTypes(v) {
			add(fmt.Sprintf("%s as %s", ptr, show(string(mustJSON(t, r)))), replaceAt(root, ptr, func(any) (any, bool) { return r, true }), true)
		}
		switch v := v.(type) {
		case string:
			for _, u := range unicodeVariants(v, rng) {
				add(fmt.Sprintf("%s as %q", ptr, u), replaceAt(root, ptr, func(any) (any, bool) { return u, true }), true)
			}
		case json.Number:
			for _, h := range []string{"9007199254740991", "-9007199254740991", "1e300", "-1e300"} {
				add(ptr+" as "+h, replaceAt(root, ptr, func(any) (any, bool) { return json.Number(h), true }), false)
			}
		}
	})
	// Deep nesting, built as text: encoding/json refuses to nest that deep.
	members := func(skip string) []string {
		var ms []string
		for _, k := range slices.Sorted(maps.Keys(root)) {
			if k != skip {
				ms = append(ms, string(mustJSON(t, k))+":"+string(mustJSON(t, root[k])))
			}
		}
		return ms
	}
	dummy := `"zz_dummy":` + strings.Repeat("[", deepNesting) + strings.Repeat("]", deepNesting)
	out = append(out, mutation{what: "a dummy field nested 10000 deep",
		args: json.RawMessage("{" + strings.Join(append([]string{dummy}, members("")...), ",") + "}"), always: true})
	for _, k := range slices.Sorted(maps.Keys(root)) {
		wrapped := string(mustJSON(t, k)) + ":" + strings.Repeat(`{"v":`, deepNesting) + string(mustJSON(t, root[k])) + strings.Repeat("}", deepNesting)
		out = append(out, mutation{what: "/" + k + " wrapped 10000 deep",
			args: json.RawMessage("{" + strings.Join(append([]string{wrapped}, members(k)...), ",") + "}"), always: true})
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// walk calls f for every value under v with its JSON pointer, v first.
func walk(v any, ptr string, f func(string, any)) {
	f(ptr, v)
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			walk(v[k], ptr+"/"+k, f)
		}
	case []any:
		for i, e := range v {
			walk(e, ptr+"/"+strconv.Itoa(i), f)
		}
	}
}

// isMember reports whether ptr names an object member (which can be
// removed), not an array element.
func isMember(root any, ptr string) bool {
	segs := strings.Split(ptr[1:], "/")
	cur := root
	for _, s := range segs[:len(segs)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[s]
		case []any:
			i, _ := strconv.Atoi(s)
			cur = c[i]
		}
	}
	_, ok := cur.(map[string]any)
	return ok
}

// replaceAt copies v with the value at ptr replaced by what f returns, or
// removed when f reports false (object members only).
func replaceAt(v any, ptr string, f func(any) (any, bool)) any {
	if ptr == "" {
		r, _ := f(v)
		return r
	}
	seg, rest, _ := strings.Cut(ptr[1:], "/")
	if rest != "" {
		rest = "/" + rest
	}
	switch c := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, e := range c {
			m[k] = e
		}
		if rest == "" {
			if r, keep := f(c[seg]); keep {
				m[seg] = r
			} else {
				delete(m, seg)
			}
			return m
		}
		m[seg] = replaceAt(c[seg], rest, f)
		return m
	case []any:
		l := slices.Clone(c)
		i, _ := strconv.Atoi(seg)
		if rest == "" {
			l[i], _ = f(c[i])
			return l
		}
		l[i] = replaceAt(c[i], rest, f)
		return l
	}
	return v
}

// otherTypes are values of every JSON type but v's.
func otherTypes(v any) []any {
	var out []any
	if _, ok := v.(string); !ok {
		if n, ok := v.(json.Number); ok {
			out = append(out, n.String())
		} else {
			b, _ := json.Marshal(v)
			out = append(out, string(b))
		}
	}
	if _, ok := v.(json.Number); !ok {
		if s, ok := v.(string); ok {
			if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				out = append(out, json.Number(strings.TrimSpace(s)))
			}
		}
		out = append(out, json.Number("0"), json.Number("1"))
	}
	if _, ok := v.(bool); !ok {
		out = append(out, true, false)
	}
	if v != nil {
		out = append(out, nil)
	}
	if _, ok := v.(map[string]any); !ok {
		out = append(out, map[string]any{}, map[string]any{"value": v})
	}
	if _, ok := v.([]any); !ok {
		out = append(out, []any{}, []any{v})
	}
	return out
}

// maxPlaces bounds the places a joiner or a mark is put in one string.
const maxPlaces = 24

// unicodeVariants are forms of s that read as s to a person or to a lenient
// tool: full-width, upper and lower case, a zero-width joiner or a
// combining mark at each place (a seeded sample of places in long strings).
func unicodeVariants(s string, rng *rand.Rand) []string {
	var out []string
	seen := map[string]bool{s: true}
	add := func(u string) {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	add(strings.Map(func(r rune) rune {
		switch {
		case r == ' ':
			return '\u3000'
		case r > ' ' && r < 0x7f:
			return r - '!' + '\uff01'
		}
		return r
	}, s))
	add(strings.ToUpper(s))
	add(strings.ToLower(s))
	n := utf8.RuneCountInString(s)
	places := make([]int, 0, n+1)
	for i := 0; i <= n; i++ {
		places = append(places, i)
	}
	if len(places) > maxPlaces {
		rng.Shuffle(len(places), func(i, j int) { places[i], places[j] = places[j], places[i] })
		places = places[:maxPlaces]
	}
	runes := []rune(s)
	for _, at := range places {
		for _, mark := range []rune{'\u200d', '\u0301'} {
			add(string(slices.Insert(slices.Clone(runes), at, mark)))
		}
	}
	return out
}

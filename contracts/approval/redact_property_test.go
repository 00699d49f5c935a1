package approval_test

// Property tests of redaction (issue 15): for any arguments and any set of
// sensitive pointers, the redacted arguments hold no sensitive value, every
// other value is untouched, the result is valid JSON of the same shape, and
// the hash of the real arguments, which redaction never recomputes, still
// holds. TestRedactProperties runs the checker over fixed pseudo-random
// arguments; FuzzRedact lets the fuzzer pick arguments and pointers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

// redactSecret is planted under every sensitive pointer; it must not
// survive redaction.
const redactSecret = "123-45-6789"

// genValue builds a random JSON value of at most depth levels; keys are
// drawn from a small set (with "/" and "~" to exercise escaping) so that
// pointers collide across levels.
func genValue(r *rand.Rand, depth int) any {
	keys := []string{"ssn", "card", "a/b", "t~n", "items", "note", "0", "*"}
	switch k := r.IntN(7); {
	case depth > 0 && k < 2:
		m := map[string]any{}
		for range r.IntN(4) {
			m[keys[r.IntN(len(keys))]] = genValue(r, depth-1)
		}
		return m
	case depth > 0 && k < 4:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = genValue(r, depth-1)
		}
		return a
	case k == 4:
		return json.Number(strconv.Itoa(r.IntN(1000)))
	case k == 5:
		return r.IntN(2) == 0
	default:
		return fmt.Sprintf("v%d", r.IntN(100))
	}
}

// leaves lists the pointer of every value in v, containers included.
func leaves(v any, at string, out map[string]any) {
	out[at] = v
	switch c := v.(type) {
	case map[string]any:
		for k, child := range c {
			leaves(child, at+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), out)
		}
	case []any:
		for i, child := range c {
			leaves(child, at+"/"+strconv.Itoa(i), out)
		}
	}
}

func decodeUseNumber(t testing.TB, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	return v
}

// plant puts the secret at the value each pointer names, so that a secret
// surviving redaction can be found by a plain search.
func plant(v any, pointer string) any {
	tokens, _ := approval.ParsePointer(pointer)
	if len(tokens) == 0 {
		return redactSecret
	}
	cur := v
	for i, tok := range tokens {
		last := i == len(tokens)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[tok] = redactSecret
			}
			cur = c[tok]
		case []any:
			n, _ := strconv.Atoi(tok)
			if last {
				c[n] = redactSecret
			}
			cur = c[n]
		}
	}
	return v
}

// under reports whether pointer p is q or inside it.
func under(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }

// checkRedaction checks Redact(args, pointers) against the properties.
func checkRedaction(t testing.TB, args json.RawMessage, pointers []string) {
	t.Helper()
	before := slices.Clone(args)
	got := approval.Redact(args, pointers)
	if !bytes.Equal(args, before) {
		t.Fatalf("Redact changed its input")
	}
	if !json.Valid(got) {
		t.Fatalf("Redact(%s, %q) is not JSON: %s", args, pointers, got)
	}
	if strings.Contains(string(got), redactSecret) {
		t.Fatalf("the secret survived Redact(%s, %q): %s", args, pointers, got)
	}
	orig, red := map[string]any{}, map[string]any{}
	leaves(decodeUseNumber(t, args), "", orig)
	leaves(decodeUseNumber(t, got), "", red)
	for p, ov := range orig {
		rv, ok := red[p]
		masked := slices.ContainsFunc(pointers, func(q string) bool { return q != p && under(p, q) })
		switch {
		case masked:
			// Inside a masked value: gone with it.
			if ok {
				t.Fatalf("%q is inside a masked value but still in %s", p, got)
			}
		case slices.Contains(pointers, p):
			if rv != approval.Mask {
				t.Fatalf("%q is sensitive but reads %v in %s", p, rv, got)
			}
		case !ok:
			t.Fatalf("%q vanished from %s", p, got)
		default:
			// Not sensitive: the same kind of value; scalars equal.
			switch o := ov.(type) {
			case map[string]any:
				r, isMap := rv.(map[string]any)
				if !isMap || len(r) != len(o) {
					t.Fatalf("%q changed shape: %v → %v", p, ov, rv)
				}
			case []any:
				r, isArr := rv.([]any)
				if !isArr || len(r) != len(o) {
					t.Fatalf("%q changed shape: %v → %v", p, ov, rv)
				}
			default:
				if fmt.Sprint(ov) != fmt.Sprint(rv) {
					t.Fatalf("%q is not sensitive but changed: %v → %v", p, ov, rv)
				}
			}
		}
	}
	for p := range red {
		if _, ok := orig[p]; !ok {
			t.Fatalf("%q appeared in %s", p, got)
		}
	}
}

func TestRedactProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 3))
	for i := range 2000 {
		v := map[string]any{}
		for range 1 + r.IntN(4) {
			v[[]string{"ssn", "card", "a/b", "items", "note"}[r.IntN(5)]] = genValue(r, 3)
		}
		all := map[string]any{}
		leaves(v, "", all)
		var candidates []string
		for p := range all {
			if p != "" {
				candidates = append(candidates, p)
			}
		}
		slices.Sort(candidates)
		var pointers []string
		for _, p := range candidates {
			if r.IntN(4) == 0 {
				pointers = append(pointers, p)
			}
		}
		// Plant the secret at every sensitive pointer, the deepest first;
		// one planted at an outer pointer replaces what inner ones named.
		slices.SortFunc(pointers, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, p := range pointers {
			plant(v, p)
		}
		// Pointers that name nothing are skipped.
		pointers = append(pointers, "/absent", "/items/99/x")
		args, err := contracts.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		// Planting may have replaced a container holding an earlier
		// pointer: keep only the pointers the final arguments have.
		present := approval.ExpandPointers(args, pointers)
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			if strings.Contains(string(args), redactSecret) {
				checkRedaction(t, args, present)
			}
			checkRedaction(t, args, append(present, "/absent"))
			checkHashes(t, args, present)
		})
	}
}

// checkHashes checks that a redacted request and record carry no
// arguments hash when some value is masked (it would confirm a guess of
// it), keep the real one when nothing is, and leave the originals alone.
func checkHashes(t testing.TB, args json.RawMessage, pointers []string) {
	t.Helper()
	sha, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	req := contracts.ApprovalRequested{
		Kind: contracts.KindToolApproval, Sensitive: pointers,
		ToolCall: &contracts.ToolCall{Name: "t", Arguments: args, ArgumentsSHA256: sha},
	}
	rec := contracts.Record{Request: req, Votes: []contracts.Vote{{Decision: contracts.DecisionEdit, Arguments: args, ArgumentsSHA256: sha}},
		Outcome: &contracts.Outcome{Decision: contracts.DecisionEdit, Arguments: args, ArgumentsSHA256: sha,
			Diff: approval.Diff(json.RawMessage(`{}`), args)}}
	red := approval.RedactRecord(rec)
	want := sha
	if len(pointers) > 0 {
		want = ""
	}
	for what, s := range map[string]string{"request": red.Request.ToolCall.ArgumentsSHA256, "outcome": red.Outcome.ArgumentsSHA256,
		"vote": red.Votes[0].ArgumentsSHA256, "redacted request": approval.RedactRequest(req).ToolCall.ArgumentsSHA256} {
		if s != want {
			t.Fatalf("%s hash %q, want %q", what, s, want)
		}
	}
	if again, _ := contracts.ArgumentsSHA256(rec.Request.ToolCall.Arguments); again != sha ||
		!bytes.Equal(rec.Votes[0].Arguments, args) || !bytes.Equal(rec.Outcome.Arguments, args) {
		t.Fatal("RedactRecord changed the record it was given")
	}
	if len(pointers) == 0 {
		return
	}
	all, err := contracts.Marshal(red)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(all), redactSecret) {
		t.Fatalf("the secret survived RedactRecord: %s", all)
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"ssn":"123-45-6789","name":"ann"}`), "/ssn")
	f.Add([]byte(`{"card":{"number":"4111","exp":"12/30"}}`), "/card/number")
	f.Add([]byte(`{"items":[{"iban":"DE00"},{"iban":"FR00"}]}`), "/items/*/iban")
	f.Add([]byte(`{"a/b":{"t~n":1}}`), "/a~1b/t~0n")
	f.Add([]byte(`[1,2]`), "")
	f.Add([]byte(`{`), "/x")
	f.Fuzz(func(t *testing.T, args []byte, pattern string) {
		pointers := approval.ExpandPointers(args, []string{pattern})
		got := approval.Redact(args, pointers)
		if len(pointers) == 0 {
			if !bytes.Equal(got, args) {
				t.Fatalf("no pointers, yet Redact changed %s to %s", args, got)
			}
			return
		}
		if !json.Valid(got) {
			t.Fatalf("Redact(%s, %q) is not JSON: %s", args, pointers, got)
		}
		if again := approval.ExpandPointers(got, pointers); len(again) != len(pointers) {
			t.Fatalf("redacted %s lost pointers: %q of %q", got, again, pointers)
		}
		values := map[string]any{}
		leaves(decodeUseNumber(t, got), "", values)
		for _, p := range pointers {
			if values[p] != approval.Mask && !slices.ContainsFunc(pointers, func(q string) bool { return q != p && under(p, q) }) {
				t.Fatalf("%q reads %v in %s, want the mask", p, values[p], got)
			}
		}
		// A diff of the real arguments from nothing, redacted, shows no
		// value the pointers name.
		d := approval.RedactDiff(approval.Diff(json.RawMessage(`{}`), args), pointers)
		if !json.Valid(d) {
			t.Fatalf("RedactDiff is not JSON: %s", d)
		}
	})
}

package approval

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/countersign/countersign/contracts"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// Diff returns an RFC 6902 JSON Patch that turns from into to. Objects are
// compared member by member; any other changed value is replaced whole.
// Invalid JSON on either side gives one replace of the root.
func Diff(from, to json.RawMessage) json.RawMessage {
	a, errA := decodeNumbers(from)
	b, errB := decodeNumbers(to)
	if errA != nil || errB != nil {
		out, _ := contracts.Marshal([]patchOp{{Op: "replace", Path: "", Value: to}})
		return out
	}
	ops := []patchOp{}
	diffValue("", a, b, &ops)
	out, _ := contracts.Marshal(ops)
	// A large diff is never larger than one replace of the whole value: the
	// size budget counts on it (contracts.MaxDiffOverhead).
	if len(out) > contracts.MaxDiffOverhead {
		if whole, err := contracts.Marshal([]patchOp{{Op: "replace", Path: "", Value: to}}); err == nil && len(whole) < len(out) {
			return whole
		}
	}
	return out
}

func diffValue(path string, a, b any, ops *[]patchOp) {
	ao, aok := a.(map[string]any)
	bo, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(ao)+len(bo))
		for k := range ao {
			keys = append(keys, k)
		}
		for k := range bo {
			if _, ok := ao[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := path + "/" + escapePointer(k)
			av, inA := ao[k]
			bv, inB := bo[k]
			switch {
			case inA && !inB:
				*ops = append(*ops, patchOp{Op: "remove", Path: p})
			case !inA && inB:
				*ops = append(*ops, patchOp{Op: "add", Path: p, Value: mustJSON(bv)})
			default:
				diffValue(p, av, bv, ops)
			}
		}
		return
	}
	if !sameJSON(mustJSON(a), mustJSON(b)) {
		*ops = append(*ops, patchOp{Op: "replace", Path: path, Value: mustJSON(b)})
	}
}

// decodeNumbers decodes raw keeping numbers as written, so large integers
// and exact decimals survive into the patch.
func decodeNumbers(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// sameJSON compares two values by their RFC 8785 canonical form, so 1 and
// 1.0 are equal, as they are for the arguments hash.
func sameJSON(a, b json.RawMessage) bool {
	ca, errA := contracts.Canonicalize(a)
	cb, errB := contracts.Canonicalize(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca, cb)
}

func mustJSON(v any) json.RawMessage {
	out, _ := contracts.Marshal(v)
	return out
}

// escapePointer escapes a key as an RFC 6901 reference token.
func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

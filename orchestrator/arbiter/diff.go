package arbiter

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
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
	var a, b any
	if json.Unmarshal(from, &a) != nil || json.Unmarshal(to, &b) != nil {
		out, _ := json.Marshal([]patchOp{{Op: "replace", Path: "", Value: to}})
		return out
	}
	ops := []patchOp{}
	diffValue("", a, b, &ops)
	out, _ := json.Marshal(ops)
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
	if !bytes.Equal(mustJSON(a), mustJSON(b)) {
		*ops = append(*ops, patchOp{Op: "replace", Path: path, Value: mustJSON(b)})
	}
}

func mustJSON(v any) json.RawMessage {
	out, _ := json.Marshal(v)
	return out
}

// escapePointer escapes a key as an RFC 6901 reference token.
func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

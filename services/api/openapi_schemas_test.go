package api_test

// The OpenAPI document carries a copy of the contract's JSON Schemas
// (contracts/schema) under components/schemas, so that the API's records,
// votes and timeline entries are typed by the same schemas as the bus and
// a client generator needs no other file. This file makes that copy:
//
//	go test ./services/api -run TestOpenAPIContractSchemas -update
//
// rewrites the copies in openapi.json in place (the rest of the document
// keeps its hand-written form), and TestOpenAPIContractSchemas fails while
// they differ from contracts/schema.
//
// The copy is the contract's schemas with three changes, none of which
// changes what they accept: every $defs entry becomes a component of its
// own and every $ref points at components (a $ref into another part of a
// schema is inlined); $schema and $id go (the document's dialect is draft
// 2020-12 and an $id would move the base of the $refs); and an object
// schema that names no properties says additionalProperties: true, which
// is JSON Schema's default but tells generators it is a free-form object.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/countersign/countersign/contracts"
)

var updateOpenAPI = flag.Bool("update", false, "rewrite openapi.json's copies of the contract schemas")

// openAPIFile is the document the server embeds and serves.
const openAPIFile = "openapi.json"

// contractComponents names the component of each contract schema
// (contracts.SchemaNames), the same names as the TypeScript client's
// generated types.
var contractComponents = map[string]string{
	"approval.requested":    "ToolApprovalRequest",
	"human_input.requested": "HumanInputRequest",
	"vote":                  "Vote",
	"command":               "Command",
	"record":                "ApprovalRecord",
	"decided":               "ApprovalDecided",
	"changed":               "ApprovalChanged",
	"notify.receipt":        "NotificationReceipt",
}

// contractDefComponents names the component of each $defs entry, by
// schema name and definition.
var contractDefComponents = map[string]map[string]string{
	"approval.requested": {
		"event_id": "EventID", "timestamp": "Timestamp", "sha256": "ArgumentsSHA256", "duration": "Duration",
		"risk": "Risk", "decision": "Decision", "on_timeout": "OnTimeout", "run": "RequestRun",
		"tool_call": "ToolCall", "question": "Question", "policy": "RequestPolicy", "quorum": "Quorum",
		"escalation_tier": "EscalationTier", "grant_limits": "GrantLimits",
	},
	"vote": {"approver": "Approver", "answer": "Answer"},
	"record": {
		"status": "ApprovalStatus", "reason": "RefusalReason", "refused_vote": "RefusedVote",
		"outcome": "Outcome", "patch_op": "PatchOp", "claim": "Claim", "review": "Review", "opinion": "Opinion",
	},
}

// member is one member of a JSON object, in document order.
type member struct {
	Key   string
	Value any
}

// object is a JSON object that keeps its members' order; the other JSON
// values decode as encoding/json does, numbers as json.Number.
type object []member

func (o object) get(key string) (any, bool) {
	for _, m := range o {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// parseOrdered decodes one JSON value, keeping the order of object members.
func parseOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// formatJSON writes v the way openapi.json is written: a value that fits
// on its line stays on it ({ "type": "string" }), a longer one opens one
// line per member, indented by two spaces more than indent.
func formatJSON(v any, indent string, used int) string {
	if one := compactJSON(v); used+len(one) <= 120 {
		return one
	}
	inner := indent + "  "
	var b strings.Builder
	switch v := v.(type) {
	case object:
		b.WriteString("{\n")
		for i, m := range v {
			key := quote(m.Key) + ": "
			b.WriteString(inner + key + formatJSON(m.Value, inner, len(inner)+len(key)+1))
			if i < len(v)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "}")
	case []any:
		if scalars(v) {
			// A long list of names: as many on a line as fit.
			b.WriteString("[\n" + inner)
			width := len(inner)
			for i, e := range v {
				item := compactJSON(e)
				if i > 0 {
					if width+2+len(item)+1 > 120 {
						b.WriteString(",\n" + inner)
						width = len(inner)
					} else {
						b.WriteString(", ")
						width += 2
					}
				}
				b.WriteString(item)
				width += len(item)
			}
			b.WriteString("\n" + indent + "]")
			return b.String()
		}
		b.WriteString("[\n")
		for i, e := range v {
			b.WriteString(inner + formatJSON(e, inner, len(inner)+1))
			if i < len(v)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "]")
	default:
		return compactJSON(v)
	}
	return b.String()
}

// scalars reports whether a list holds no objects or lists.
func scalars(list []any) bool {
	for _, e := range list {
		switch e.(type) {
		case object, []any:
			return false
		}
	}
	return true
}

func compactJSON(v any) string {
	switch v := v.(type) {
	case object:
		if len(v) == 0 {
			return "{}"
		}
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = quote(m.Key) + ": " + compactJSON(m.Value)
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = compactJSON(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return v.String()
	case string:
		return quote(v)
	}
	panic(fmt.Sprintf("formatJSON: unexpected %T", v))
}

// quote writes s as a JSON string the way the contract files do (no
// escaping of <, > and &).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// contractSchemaComponents is what openapi.json's components/schemas must
// hold of the contract: each schema and each of its definitions, by
// component name, in a stable order.
func contractSchemaComponents() (object, error) {
	files := map[string]any{}
	for _, name := range contracts.SchemaNames() {
		if _, ok := contractComponents[name]; !ok {
			return nil, fmt.Errorf("contract schema %s has no component name: add it to contractComponents", name)
		}
		data, err := contracts.Schema(name)
		if err != nil {
			return nil, err
		}
		if files[name], err = parseOrdered(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	for name := range contractComponents {
		if files[name] == nil {
			return nil, fmt.Errorf("contractComponents names %s, which the contract does not have", name)
		}
	}
	c := &schemaCopier{files: files}
	var out object
	for _, name := range contracts.SchemaNames() {
		schema := files[name].(object)
		var top object
		for _, m := range schema {
			switch m.Key {
			case "$schema", "$id", "$defs":
			default:
				top = append(top, member{m.Key, c.copy(name, m.Value)})
			}
		}
		out = append(out, member{contractComponents[name], freeForm(top)})
		defs, _ := schema.get("$defs")
		defs, _ = defs.(object)
		for _, d := range defs.(object) {
			comp, ok := contractDefComponents[name][d.Key]
			if !ok {
				return nil, fmt.Errorf("%s#/$defs/%s has no component name: add it to contractDefComponents", name, d.Key)
			}
			out = append(out, member{comp, c.copy(name, d.Value)})
		}
		for def := range contractDefComponents[name] {
			if _, ok := defs.(object).get(def); !ok {
				return nil, fmt.Errorf("contractDefComponents names %s#/$defs/%s, which the contract does not have", name, def)
			}
		}
	}
	return out, c.err
}

// schemaCopier copies the parts of one contract schema, rewriting $refs.
type schemaCopier struct {
	files map[string]any
	err   error
}

func (c *schemaCopier) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// copy copies v, a part of the schema named file.
func (c *schemaCopier) copy(file string, v any) any {
	switch v := v.(type) {
	case object:
		ref, ok := v.get("$ref")
		if !ok {
			var o object
			for _, m := range v {
				o = append(o, member{m.Key, c.copy(file, m.Value)})
			}
			return freeForm(o)
		}
		target, pointer, _ := strings.Cut(ref.(string), "#")
		if target == "" {
			target = file
		} else {
			target = strings.TrimSuffix(target, ".schema.json")
		}
		var o object
		switch def, isDef := strings.CutPrefix(pointer, "/$defs/"); {
		case pointer == "":
			o = object{{"$ref", "#/components/schemas/" + contractComponents[target]}}
		case isDef && contractDefComponents[target][def] != "":
			o = object{{"$ref", "#/components/schemas/" + contractDefComponents[target][def]}}
		default:
			// A $ref into another part of a schema: inline that part.
			part, ok := resolvePointer(c.files[target], pointer)
			if !ok {
				c.fail("%s: $ref %s does not resolve", file, ref)
				return v
			}
			inlined, _ := c.copy(target, part).(object)
			o = append(o, inlined...)
		}
		for _, m := range v {
			if m.Key != "$ref" {
				o = append(o, member{m.Key, c.copy(file, m.Value)})
			}
		}
		return o
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = c.copy(file, e)
		}
		return a
	}
	return v
}

// freeForm adds additionalProperties: true to an object schema that
// declares no properties, so that generators type it as a free-form object
// (openapi-typescript makes a bare {"type":"object"} an object with no
// keys at all).
func freeForm(o object) object {
	t, _ := o.get("type")
	if t != "object" {
		return o
	}
	for _, k := range []string{"properties", "additionalProperties", "patternProperties", "$ref"} {
		if _, ok := o.get(k); ok {
			return o
		}
	}
	return append(o, member{"additionalProperties", true})
}

// resolvePointer follows a JSON pointer (RFC 6901) from v.
func resolvePointer(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case object:
			var ok bool
			if v, ok = x.get(tok); !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// span is where a member's value sits in a file.
type span struct{ start, end int64 }

// edit replaces a span of a file with text.
type edit struct {
	span
	text string
}

// schemaSpans finds, in an OpenAPI document, the value of every member of
// components/schemas and the offset of the object's closing brace.
func schemaSpans(doc []byte) (map[string]span, int64, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	// enter reads an object's members up to key and leaves the decoder at
	// the start of that member's value.
	enter := func(key string) error {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return fmt.Errorf("%s: not an object (%v)", key, err)
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			if k == key {
				return nil
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
		}
		return fmt.Errorf("no member %s", key)
	}
	if err := enter("components"); err != nil {
		return nil, 0, err
	}
	if err := enter("schemas"); err != nil {
		return nil, 0, err
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, 0, fmt.Errorf("components/schemas is not an object (%v)", err)
	}
	spans := map[string]span{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, 0, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, err
		}
		end := dec.InputOffset()
		spans[k.(string)] = span{end - int64(len(raw)), end}
	}
	if _, err := dec.Token(); err != nil {
		return nil, 0, err
	}
	return spans, dec.InputOffset() - 1, nil
}

// spliceContractSchemas rewrites the contract components of doc (an
// OpenAPI document as written in openapi.json), replacing those present
// in place and adding the others at the end of components/schemas.
func spliceContractSchemas(doc []byte, comps object) ([]byte, error) {
	spans, closing, err := schemaSpans(doc)
	if err != nil {
		return nil, err
	}
	const indent = "      "
	var edits []edit
	var added strings.Builder
	for _, c := range comps {
		key := quote(c.Key) + ": "
		text := formatJSON(c.Value, indent, len(indent)+len(key)+1)
		if s, ok := spans[c.Key]; ok {
			edits = append(edits, edit{s, text})
		} else {
			added.WriteString(",\n" + indent + key + text)
		}
	}
	if added.Len() > 0 {
		last := int64(bytes.LastIndexFunc(doc[:closing], func(r rune) bool { return !strings.ContainsRune(" \t\r\n", r) })) + 1
		edits = append(edits, edit{span{last, last}, added.String()})
	}
	var out []byte
	at := int64(0)
	slices.SortFunc(edits, func(a, b edit) int { return cmp.Compare(a.start, b.start) })
	for _, e := range edits {
		out = append(out, doc[at:e.start]...)
		out = append(out, e.text...)
		at = e.end
	}
	return append(out, doc[at:]...), nil
}

// writeOpenAPI rewrites openapi.json with comps.
func writeOpenAPI(comps object) error {
	doc, err := os.ReadFile(openAPIFile)
	if err != nil {
		return err
	}
	out, err := spliceContractSchemas(doc, comps)
	if err != nil {
		return err
	}
	if !json.Valid(out) {
		return errors.New("the rewritten document is not valid JSON")
	}
	return os.WriteFile(openAPIFile, out, 0o644)
}

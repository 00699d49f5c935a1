package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/countersign/countersign/contracts"
)

const (
	schemaDialect = "https://json-schema.org/draft/2020-12/schema"
	schemaBaseURL = "https://countersign.dev/schema/"
	goldenDir     = "testdata/golden"
)

// schemaSpecs maps every schema of the contract to the spec it fixes and the
// Go type that carries the message.
var schemaSpecs = map[string]struct {
	spec string
	typ  reflect.Type
}{
	"approval.requested":    {contracts.SpecApprovalRequested, reflect.TypeFor[contracts.ApprovalRequested]()},
	"human_input.requested": {contracts.SpecHumanInputRequested, reflect.TypeFor[contracts.ApprovalRequested]()},
	"vote":                  {contracts.SpecVote, reflect.TypeFor[contracts.Vote]()},
	"command":               {contracts.SpecCommand, reflect.TypeFor[contracts.Command]()},
	"decided":               {contracts.SpecDecided, reflect.TypeFor[contracts.Decided]()},
	"changed":               {contracts.SpecChanged, reflect.TypeFor[contracts.Changed]()},
	"record":                {contracts.SpecRecord, reflect.TypeFor[contracts.Record]()},
	"notify.receipt":        {contracts.SpecNotifyReceipt, reflect.TypeFor[contracts.NotifyReceipt]()},
}

// goldens maps every golden file to the schema it is an instance of.
var goldens = map[string]string{
	"approval.requested.json":    "approval.requested",
	"human_input.requested.json": "human_input.requested",
	"vote.approve.json":          "vote",
	"vote.edit.json":             "vote",
	"command.claim.json":         "command",
	"decided.json":               "decided",
	"changed.json":               "changed",
	"record.approved.json":       "record",
	"notify.receipt.json":        "notify.receipt",
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func readGolden(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, file))
	if err != nil {
		t.Fatalf("read golden %s: %v", file, err)
	}
	return data
}

func decodeAny(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode JSON: %v\n%s", err, data)
	}
	return v
}

// loadSchemas reads every embedded schema, keyed by file name as relative
// $refs name them.
func loadSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	docs := map[string]map[string]any{}
	for _, name := range contracts.SchemaNames() {
		data, err := contracts.Schema(name)
		if err != nil {
			t.Fatalf("Schema(%q): %v", name, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("schema %s is not a JSON object: %v", name, err)
		}
		docs[name+".schema.json"] = doc
	}
	return docs
}

func TestSchemaNamesCoverEveryMessage(t *testing.T) {
	got := contracts.SchemaNames()
	want := sortedKeys(schemaSpecs)
	if !slices.Equal(got, want) {
		t.Fatalf("SchemaNames() = %v, want %v", got, want)
	}
}

func TestSchemaLookup(t *testing.T) {
	byName, err := contracts.Schema("vote")
	if err != nil {
		t.Fatalf(`Schema("vote"): %v`, err)
	}
	byFile, err := contracts.Schema("vote.schema.json")
	if err != nil {
		t.Fatalf(`Schema("vote.schema.json"): %v`, err)
	}
	if !bytes.Equal(byName, byFile) {
		t.Error("Schema by name and by file name differ")
	}
	for _, name := range []string{"", "nope", "../doc.go", "schema/vote", ".schema.json"} {
		if data, err := contracts.Schema(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Schema(%q) = %d bytes, %v; want an error wrapping fs.ErrNotExist", name, len(data), err)
		}
	}
}

func TestSchemaHeaders(t *testing.T) {
	docs := loadSchemas(t)
	for _, name := range sortedKeys(schemaSpecs) {
		t.Run(name, func(t *testing.T) {
			doc := docs[name+".schema.json"]
			if doc == nil {
				t.Fatalf("no schema %s", name)
			}
			if got := doc["$schema"]; got != schemaDialect {
				t.Errorf("$schema = %v, want %s", got, schemaDialect)
			}
			if got, want := doc["$id"], schemaBaseURL+name+".schema.json"; got != want {
				t.Errorf("$id = %v, want %s", got, want)
			}
			if doc["type"] != "object" {
				t.Errorf("type = %v, want object", doc["type"])
			}
			if doc["additionalProperties"] != true {
				t.Errorf("additionalProperties = %v, want true: readers accept unknown fields", doc["additionalProperties"])
			}
			props, _ := doc["properties"].(map[string]any)
			spec, _ := props["spec"].(map[string]any)
			if got, want := spec["const"], schemaSpecs[name].spec; got != want {
				t.Errorf("properties.spec.const = %v, want %s", got, want)
			}
			if req, _ := doc["required"].([]any); !slices.Contains(req, any("spec")) {
				t.Errorf("spec is not required: %v", req)
			}
		})
	}
}

func TestGoldenFilesAreListed(t *testing.T) {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := sortedKeys(goldens); !slices.Equal(files, want) {
		t.Errorf("golden files = %v, want %v", files, want)
	}
	covered := map[string]bool{}
	for _, schema := range goldens {
		covered[schema] = true
	}
	for _, name := range contracts.SchemaNames() {
		if !covered[name] {
			t.Errorf("schema %s has no golden file", name)
		}
	}
}

// TestGoldenRoundTrip decodes every golden into its Go type, strictly, and
// encodes it again: the Go type knows every field of the golden and the
// round trip loses nothing.
func TestGoldenRoundTrip(t *testing.T) {
	for _, file := range sortedKeys(goldens) {
		t.Run(file, func(t *testing.T) {
			data := readGolden(t, file)
			typ := schemaSpecs[goldens[file]].typ
			ptr := reflect.New(typ)
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(ptr.Interface()); err != nil {
				t.Fatalf("decode into %s: %v", typ, err)
			}
			out, err := json.Marshal(ptr.Interface())
			if err != nil {
				t.Fatalf("encode %s: %v", typ, err)
			}
			if want, got := decodeAny(t, data), decodeAny(t, out); !reflect.DeepEqual(want, got) {
				t.Errorf("round trip changed the message\ngolden: %s\nencoded: %s", compact(t, data), out)
			}
		})
	}
}

func compact(t *testing.T, data []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestGoldenSpec(t *testing.T) {
	for _, file := range sortedKeys(goldens) {
		var msg struct {
			Spec string `json:"spec"`
		}
		if err := json.Unmarshal(readGolden(t, file), &msg); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if want := schemaSpecs[goldens[file]].spec; msg.Spec != want {
			t.Errorf("%s: spec = %q, want %q", file, msg.Spec, want)
		}
	}
}

func TestGoldenValidAgainstSchema(t *testing.T) {
	docs := loadSchemas(t)
	for _, file := range sortedKeys(goldens) {
		t.Run(file, func(t *testing.T) {
			schema := goldens[file] + ".schema.json"
			inst := decodeAny(t, readGolden(t, file))
			if errs := validate(docs, schema, inst); len(errs) > 0 {
				t.Errorf("golden does not satisfy %s:\n%s", schema, errors.Join(errs...))
			}
			// Every required property at the top level is present.
			obj := inst.(map[string]any)
			for _, r := range docs[schema]["required"].([]any) {
				if _, ok := obj[r.(string)]; !ok {
					t.Errorf("required property %q is missing", r)
				}
			}
		})
	}
}

// TestGoldenHashes checks that the hashes in the golden files are the RFC
// 8785 hashes of the arguments they stand for.
func TestGoldenHashes(t *testing.T) {
	var req contracts.ApprovalRequested
	mustUnmarshal(t, readGolden(t, "approval.requested.json"), &req)
	requested := mustHash(t, req.ToolCall.Arguments)
	if req.ToolCall.ArgumentsSHA256 != requested {
		t.Errorf("request arguments_sha256 = %s, want %s", req.ToolCall.ArgumentsSHA256, requested)
	}

	var edit contracts.Vote
	mustUnmarshal(t, readGolden(t, "vote.edit.json"), &edit)
	if edit.ArgumentsSHA256 != requested {
		t.Errorf("edit vote arguments_sha256 = %s, want the hash of the arguments the approver saw, %s", edit.ArgumentsSHA256, requested)
	}
	edited := mustHash(t, edit.Arguments)

	var rec contracts.Record
	mustUnmarshal(t, readGolden(t, "record.approved.json"), &rec)
	if rec.Outcome.ArgumentsSHA256 != edited || mustHash(t, rec.Outcome.Arguments) != edited {
		t.Errorf("record outcome arguments_sha256 = %s, want the edited arguments' %s", rec.Outcome.ArgumentsSHA256, edited)
	}
	var decided contracts.Decided
	mustUnmarshal(t, readGolden(t, "decided.json"), &decided)
	if decided.Outcome.ArgumentsSHA256 != edited {
		t.Errorf("decided outcome arguments_sha256 = %s, want %s", decided.Outcome.ArgumentsSHA256, edited)
	}
	var approve contracts.Vote
	mustUnmarshal(t, readGolden(t, "vote.approve.json"), &approve)
	if approve.ArgumentsSHA256 != edited {
		t.Errorf("approve vote arguments_sha256 = %s, want the edited arguments' %s", approve.ArgumentsSHA256, edited)
	}
}

func mustUnmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func mustHash(t *testing.T, args json.RawMessage) string {
	t.Helper()
	sum, err := contracts.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestSchemaMatchesGoTypes walks every schema beside its Go type: each
// property a schema lists is a json field of the type, and each json field
// of the type is listed, at every level of nesting.
func TestSchemaMatchesGoTypes(t *testing.T) {
	docs := loadSchemas(t)
	for _, name := range sortedKeys(schemaSpecs) {
		t.Run(name, func(t *testing.T) {
			file := name + ".schema.json"
			for _, err := range compareFields(docs, file, docs[file], schemaSpecs[name].typ, name) {
				t.Error(err)
			}
		})
	}
}

// jsonFields lists the json names of a struct's fields.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

func compareFields(docs map[string]map[string]any, file string, node any, typ reflect.Type, path string) []error {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	file, n := resolve(docs, file, node)
	if n == nil {
		return []error{fmt.Errorf("%s: unresolvable schema", path)}
	}
	if typ == timeType || typ == rawType {
		return nil
	}
	if alts, ok := n["anyOf"].([]any); ok {
		var errs []error
		for i, alt := range alts {
			errs = append(errs, compareFields(docs, file, alt, typ, fmt.Sprintf("%s(anyOf %d)", path, i))...)
		}
		return errs
	}
	switch typ.Kind() {
	case reflect.Slice:
		items, ok := n["items"]
		if !ok {
			return []error{fmt.Errorf("%s: Go type %s is a list but the schema has no items", path, typ)}
		}
		return compareFields(docs, file, items, typ.Elem(), path+"[]")
	case reflect.Struct:
	default:
		return nil
	}
	props, _ := n["properties"].(map[string]any)
	if props == nil {
		return []error{fmt.Errorf("%s: Go type %s is an object but the schema lists no properties", path, typ)}
	}
	fields := jsonFields(typ)
	var errs []error
	for _, p := range sortedKeys(props) {
		if _, ok := fields[p]; !ok {
			errs = append(errs, fmt.Errorf("%s: schema property %q has no json field in %s", path, p, typ))
		}
	}
	for _, f := range sortedKeys(fields) {
		prop, ok := props[f]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: json field %q of %s is not in the schema", path, f, typ))
			continue
		}
		errs = append(errs, compareFields(docs, file, prop, fields[f], path+"."+f)...)
	}
	return errs
}

// TestUnknownFieldsAccepted adds fields a future version might send to every
// object of every golden: the Go types decode them without error and keep
// every known field.
func TestUnknownFieldsAccepted(t *testing.T) {
	for _, file := range sortedKeys(goldens) {
		t.Run(file, func(t *testing.T) {
			data := readGolden(t, file)
			typ := schemaSpecs[goldens[file]].typ
			inst := decodeAny(t, data)
			added := addUnknownFields(inst, typ)
			if added == 0 {
				t.Fatal("no object to add unknown fields to")
			}
			future, err := json.Marshal(inst)
			if err != nil {
				t.Fatal(err)
			}
			fromGolden, fromFuture := reflect.New(typ), reflect.New(typ)
			mustUnmarshal(t, data, fromGolden.Interface())
			if err := json.Unmarshal(future, fromFuture.Interface()); err != nil {
				t.Fatalf("a message with unknown fields is refused: %v", err)
			}
			a, _ := json.Marshal(fromGolden.Interface())
			b, _ := json.Marshal(fromFuture.Interface())
			if !reflect.DeepEqual(decodeAny(t, a), decodeAny(t, b)) {
				t.Errorf("unknown fields changed the known ones\nwant: %s\ngot:  %s", a, b)
			}
		})
	}
}

// addUnknownFields adds unknown members to v and to every object nested in
// it that the Go type decodes field by field (not to raw JSON such as tool
// arguments), and returns how many objects it changed.
func addUnknownFields(v any, typ reflect.Type) int {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch x := v.(type) {
	case []any:
		if typ.Kind() != reflect.Slice || typ == rawType {
			return 0
		}
		n := 0
		for _, e := range x {
			n += addUnknownFields(e, typ.Elem())
		}
		return n
	case map[string]any:
		if typ.Kind() != reflect.Struct || typ == timeType {
			return 0
		}
		fields := jsonFields(typ)
		n := 1
		for k, e := range x {
			if ft, ok := fields[k]; ok {
				n += addUnknownFields(e, ft)
			}
		}
		x["x_added_in_v1_9"] = map[string]any{"nested": []any{1.0, "two", nil}}
		x["approver_note"] = "unknown to this reader"
		return n
	}
	return 0
}

// TestSchemaCheckerRefuses proves the schemas and the checker have teeth:
// each broken golden must fail validation.
func TestSchemaCheckerRefuses(t *testing.T) {
	docs := loadSchemas(t)
	cases := []struct {
		name   string
		file   string
		mutate func(m map[string]any)
	}{
		{"request without spec", "approval.requested.json", func(m map[string]any) { delete(m, "spec") }},
		{"request of another major version", "approval.requested.json", func(m map[string]any) {
			m["spec"] = "countersign.approval.requested/v2"
		}},
		{"request with unknown risk", "approval.requested.json", func(m map[string]any) { m["risk"] = "extreme" }},
		{"request with unknown on_timeout", "approval.requested.json", func(m map[string]any) { m["on_timeout"] = "ignore" }},
		{"request with unknown order", "approval.requested.json", func(m map[string]any) {
			m["quorum"].(map[string]any)["order"] = "random"
		}},
		{"request with a bad hash", "approval.requested.json", func(m map[string]any) {
			m["tool_call"].(map[string]any)["arguments_sha256"] = "ABC"
		}},
		{"request without tool_call", "approval.requested.json", func(m map[string]any) { delete(m, "tool_call") }},
		{"request with arguments that are not an object", "approval.requested.json", func(m map[string]any) {
			m["tool_call"].(map[string]any)["arguments"] = []any{"rm", "-rf"}
		}},
		{"request with a bad event_id", "approval.requested.json", func(m map[string]any) { m["event_id"] = "a.b" }},
		{"request with a bad reminder", "approval.requested.json", func(m map[string]any) { m["reminders"] = []any{"soon"} }},
		{"request with a bad timestamp", "approval.requested.json", func(m map[string]any) { m["expires_at"] = "tomorrow" }},
		{"human input without question", "human_input.requested.json", func(m map[string]any) { delete(m, "question") }},
		{"human input of the wrong kind", "human_input.requested.json", func(m map[string]any) { m["kind"] = "tool_approval" }},
		{"vote without approver", "vote.approve.json", func(m map[string]any) { delete(m, "approver") }},
		{"vote with unknown decision", "vote.approve.json", func(m map[string]any) { m["decision"] = "maybe" }},
		{"vote through unknown channel", "vote.approve.json", func(m map[string]any) {
			m["approver"].(map[string]any)["via"] = "fax"
		}},
		{"vote with a numeric decided_at", "vote.approve.json", func(m map[string]any) { m["decided_at"] = 1.5 }},
		{"edit without arguments", "vote.edit.json", func(m map[string]any) { delete(m, "arguments") }},
		{"answer without answer", "vote.approve.json", func(m map[string]any) { m["decision"] = "answer" }},
		{"claim without claim_id", "command.claim.json", func(m map[string]any) { delete(m, "claim_id") }},
		{"extend without until", "command.claim.json", func(m map[string]any) { m["command"] = "extend" }},
		{"unknown command", "command.claim.json", func(m map[string]any) { m["command"] = "pause" }},
		{"decided while pending", "decided.json", func(m map[string]any) { m["status"] = "pending" }},
		{"decided with a zero revision", "decided.json", func(m map[string]any) { m["revision"] = 0.0 }},
		{"decided with a fractional revision", "decided.json", func(m map[string]any) { m["revision"] = 41.5 }},
		{"changed of unknown kind", "changed.json", func(m map[string]any) { m["change"] = "renamed" }},
		{"changed with unknown reason", "changed.json", func(m map[string]any) { m["reason"] = "felt_like_it" }},
		{"record with unknown status", "record.approved.json", func(m map[string]any) { m["status"] = "done" }},
		{"terminal record without outcome", "record.approved.json", func(m map[string]any) { delete(m, "outcome") }},
		{"record with a request of unknown kind", "record.approved.json", func(m map[string]any) {
			m["request"].(map[string]any)["kind"] = "other"
		}},
		{"record with an invalid vote", "record.approved.json", func(m map[string]any) {
			m["votes"].([]any)[0].(map[string]any)["decision"] = "maybe"
		}},
		{"record with an unknown refusal reason", "record.approved.json", func(m map[string]any) {
			m["refused_votes"].([]any)[0].(map[string]any)["reason"] = "grumpy"
		}},
		{"record with an unknown patch op", "record.approved.json", func(m map[string]any) {
			m["outcome"].(map[string]any)["diff"].([]any)[0].(map[string]any)["op"] = "frobnicate"
		}},
		{"record with a claim without id", "record.approved.json", func(m map[string]any) {
			delete(m["claim"].(map[string]any), "claim_id")
		}},
		{"record keeping more than 100 refused votes", "record.approved.json", func(m map[string]any) {
			rv := m["refused_votes"].([]any)
			for len(rv) <= contracts.MaxRefusedVotes {
				rv = append(rv, rv[0])
			}
			m["refused_votes"] = rv
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			schema := goldens[tc.file] + ".schema.json"
			inst := decodeAny(t, readGolden(t, tc.file)).(map[string]any)
			tc.mutate(inst)
			errs := validate(docs, schema, inst)
			if len(errs) == 0 {
				t.Fatalf("the broken %s satisfies %s", tc.file, schema)
			}
			t.Log(errors.Join(errs...))
		})
	}

	t.Run("pending record needs no outcome", func(t *testing.T) {
		inst := decodeAny(t, readGolden(t, "record.approved.json")).(map[string]any)
		inst["status"] = "pending"
		delete(inst, "outcome")
		delete(inst, "claim")
		if errs := validate(docs, "record.schema.json", inst); len(errs) > 0 {
			t.Errorf("a pending record without outcome is refused: %v", errors.Join(errs...))
		}
	})
}

// validate checks inst against the named schema file with a real JSON
// Schema implementation (draft 2020-12, formats asserted); cross-file $refs
// resolve between the contract's own schemas, and nothing is fetched.
func validate(docs map[string]map[string]any, file string, inst any) []error {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for name, doc := range docs {
		if err := c.AddResource(schemaBase+name, doc); err != nil {
			return []error{err}
		}
	}
	s, err := c.Compile(schemaBase + file)
	if err != nil {
		return []error{err}
	}
	if err := s.Validate(inst); err != nil {
		return []error{err}
	}
	return nil
}

// schemaBase is where the contract's schemas say they live ($id).
const schemaBase = "https://countersign.dev/schema/"

func TestAgentToken(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Billing Bot/EU", "billing_bot_eu"},
		{"billing-bot_2", "billing-bot_2"},
		{"", "_"},
		{"ops.agent", "ops_agent"},
		{"a*b>c", "a_b_c"},
		{"  ", "__"},
		{"Ünïcode", "_n_code"},
		{"日本", "__"},
		{"bad\xffutf8", "bad_utf8"},
		{"TAB\tNL\n", "tab_nl_"},
	}
	allowed := regexp.MustCompile(`^[a-z0-9_-]+$`)
	for _, tc := range cases {
		got := contracts.AgentToken(tc.in)
		if got != tc.want {
			t.Errorf("AgentToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !allowed.MatchString(got) {
			t.Errorf("AgentToken(%q) = %q is not a safe subject token", tc.in, got)
		}
	}
	if got, want := contracts.ToolRequestedSubject("Billing Bot/EU"), "hitl.tool.approval.requested.billing_bot_eu"; got != want {
		t.Errorf("ToolRequestedSubject = %q, want %q", got, want)
	}
	if got, want := contracts.InputRequestedSubject("Billing Bot/EU"), "hitl.human.input.requested.billing_bot_eu"; got != want {
		t.Errorf("InputRequestedSubject = %q, want %q", got, want)
	}
}

func TestValidEventID(t *testing.T) {
	valid := []string{
		"312783e4-11a0-5e21-b755-806afd756c7e",
		"a",
		"A_b-9",
		strings.Repeat("x", 64),
	}
	invalid := []string{
		"",
		strings.Repeat("x", 65),
		"a.b",
		"a b",
		"a*",
		"a>",
		"a/b",
		"é",
		"id\n",
		"$KV",
	}
	for _, id := range valid {
		if !contracts.ValidEventID(id) {
			t.Errorf("ValidEventID(%q) = false, want true", id)
		}
	}
	for _, id := range invalid {
		if contracts.ValidEventID(id) {
			t.Errorf("ValidEventID(%q) = true, want false", id)
		}
	}
}

// resolve follows $ref (relative to the schema file it appears in) until it
// reaches a node without one, and returns that node and its file (for the
// walk of schemas beside Go types).
func resolve(docs map[string]map[string]any, file string, node any) (string, map[string]any) {
	for range 16 {
		n, ok := node.(map[string]any)
		if !ok {
			return file, nil
		}
		ref, ok := n["$ref"].(string)
		if !ok || len(n) > 2 || (len(n) == 2 && n["description"] == nil) {
			return file, n
		}
		var target any
		file, target = lookupRef(docs, file, ref)
		node = target
	}
	return file, nil
}

// lookupRef finds a $ref's target among the contract's schemas.
func lookupRef(docs map[string]map[string]any, file, ref string) (string, any) {
	docPart, pointer, _ := strings.Cut(ref, "#")
	if docPart != "" {
		file = docPart
	}
	doc, ok := docs[file]
	if !ok {
		return file, nil
	}
	var cur any = doc
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		m, ok := cur.(map[string]any)
		if !ok {
			return file, nil
		}
		cur = m[tok]
	}
	return file, cur
}

package api_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// apiCodes are the package's error codes (its exported Code* constants)
// by constant name; TestOpenAPIErrorCodes checks that the list is complete.
var apiCodes = map[string]string{
	"CodeUnauthenticated": api.CodeUnauthenticated, "CodeForbidden": api.CodeForbidden,
	"CodeNotFound": api.CodeNotFound, "CodeMethodNotAllowed": api.CodeMethodNotAllowed,
	"CodeInvalidJSON": api.CodeInvalidJSON, "CodeUnknownField": api.CodeUnknownField,
	"CodeBodyTooLarge": api.CodeBodyTooLarge, "CodeTooLarge": api.CodeTooLarge,
	"CodeInvalidField": api.CodeInvalidField, "CodeInvalidParameter": api.CodeInvalidParameter,
	"CodeInvalidArguments": api.CodeInvalidArguments, "CodeInvalidSchema": api.CodeInvalidSchema,
	"CodeInvalidEventID": api.CodeInvalidEventID, "CodeApproverNotAllowed": api.CodeApproverNotAllowed,
	"CodeArgumentsChanged": api.CodeArgumentsChanged, "CodeUnknownEvent": api.CodeUnknownEvent,
	"CodeUnavailable": api.CodeUnavailable, "CodeNotReady": api.CodeNotReady, "CodeInternal": api.CodeInternal,
	"CodeInvalidPolicy": api.CodeInvalidPolicy, "CodeVersionExists": api.CodeVersionExists,
	"CodePolicyConflict": api.CodePolicyConflict, "CodeNoLivePolicy": api.CodeNoLivePolicy,
	"CodeUnknownGrant": api.CodeUnknownGrant, "CodeReceiptReplayed": api.CodeReceiptReplayed,
	"CodeRateLimited": api.CodeRateLimited, "CodeTooManyStreams": api.CodeTooManyStreams,
	"CodePendingQuota": api.CodePendingQuota, "CodeTooManyConnections": api.CodeTooManyConnections,
	"CodePasskeysOff": api.CodePasskeysOff, "CodeEnrolmentExpired": api.CodeEnrolmentExpired,
	"CodeEnrolmentInvalid": api.CodeEnrolmentInvalid, "CodeUnknownPasskey": api.CodeUnknownPasskey,
	"CodeStepUpNotApplicable": api.CodeStepUpNotApplicable,
	"CodePushOff":             api.CodePushOff, "CodeInvalidToken": api.CodeInvalidToken, "CodeTooManyDevices": api.CodeTooManyDevices,
}

// readOpenAPI reads openapi.json, the document the server embeds and
// serves at /openapi.json (TestOpenAPIDocumentsEveryRoute reads it there).
func readOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	return doc
}

// at follows a path of member names and array indexes (as strings) in a
// decoded JSON document; it fails the test when the path does not exist.
func at(t *testing.T, v any, path ...string) any {
	t.Helper()
	pointer := ""
	for _, p := range path {
		pointer += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(p)
	}
	got, ok := resolvePointer(toOrdered(v), pointer)
	if !ok || len(path) == 0 {
		t.Fatalf("the document has no %s", strings.Join(path, "/"))
	}
	return fromOrdered(got)
}

func toOrdered(v any) any {
	switch v := v.(type) {
	case map[string]any:
		o := object{}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			o = append(o, member{k, toOrdered(v[k])})
		}
		return o
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = toOrdered(e)
		}
		return a
	}
	return v
}

func fromOrdered(v any) any {
	switch v := v.(type) {
	case object:
		m := map[string]any{}
		for _, e := range v {
			m[e.Key] = fromOrdered(e.Value)
		}
		return m
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = fromOrdered(e)
		}
		return a
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return v
}

func stringList(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not a list", v)
	}
	out := make([]string, len(list))
	for i, e := range list {
		if out[i], ok = e.(string); !ok {
			t.Fatalf("%v is not a list of strings", v)
		}
	}
	return out
}

// TestOpenAPIErrorCodes: the error body's code is an enum of every code the
// API can answer — the package's Code* constants and every refusal reason
// — so that a client generator gives it a closed type, and a new code
// cannot be left out of the document.
func TestOpenAPIErrorCodes(t *testing.T) {
	// Every exported Code* constant of the package is in apiCodes.
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, id := range s.(*ast.ValueSpec).Names {
						if id.IsExported() && strings.HasPrefix(id.Name, "Code") {
							declared[id.Name] = true
						}
					}
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(declared)) {
		if _, ok := apiCodes[name]; !ok {
			t.Errorf("the package declares %s: add it to apiCodes (and to the document's Error code enum)", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(apiCodes)) {
		if !declared[name] {
			t.Errorf("apiCodes lists %s, which the package does not declare", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	want := map[string]bool{}
	for _, c := range apiCodes {
		want[c] = true
	}
	for _, r := range contracts.Reasons() {
		want[string(r)] = true
	}
	// The fuzz test's list of codes an answer may carry is the same set.
	if !maps.Equal(want, errorCodes) {
		t.Fatalf("errorCodes (fuzz_test.go) is %v, the codes are %v", slices.Sorted(maps.Keys(errorCodes)), slices.Sorted(maps.Keys(want)))
	}

	doc := readOpenAPI(t)
	code := at(t, doc, "components", "schemas", "Error", "properties", "error", "properties", "code").(map[string]any)
	if code["type"] != "string" {
		t.Fatalf("Error code type %v, want string", code["type"])
	}
	if code["enum"] == nil {
		t.Fatal("the Error code has no enum")
	}
	enum := stringList(t, code["enum"])
	listed := map[string]bool{}
	for _, c := range enum {
		if listed[c] {
			t.Errorf("the Error code enum lists %s twice", c)
		}
		listed[c] = true
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		if !listed[c] {
			t.Errorf("the Error code enum lacks %s", c)
		}
	}
	for _, c := range enum {
		if !want[c] {
			t.Errorf("the Error code enum lists %s, which is no code of the API", c)
		}
	}
	// The policy error's code is one of them.
	if c := at(t, doc, "components", "schemas", "PolicyError", "properties", "error", "properties", "code", "const"); c != api.CodeInvalidPolicy {
		t.Fatalf("PolicyError code %v", c)
	}
	// A review or question result's code is request_refused.
	for _, path := range [][]string{
		{"components", "schemas", "ReviewResponse", "properties", "results", "items", "properties", "code", "enum"},
		{"components", "schemas", "QuestionResponse", "properties", "code", "enum"},
	} {
		if got := stringList(t, at(t, doc, path...)); !slices.Equal(got, []string{contracts.ReasonRequestRefused}) {
			t.Fatalf("%s: %v, want [%s]", strings.Join(path, "/"), got, contracts.ReasonRequestRefused)
		}
	}
	// A vote's refusals are documented under the status they are answered
	// with (the command-only reasons apart).
	commandOnly := map[contracts.Reason]bool{contracts.ReasonAlreadyClaimed: true, contracts.ReasonNotApproved: true, contracts.ReasonUnknownGrant: true}
	votes := at(t, doc, "paths", "/v1/approvals/{event_id}/votes", "post", "responses").(map[string]any)
	for _, r := range contracts.Reasons() {
		if commandOnly[r] {
			continue
		}
		status := r.HTTPStatus()
		resp, ok := votes[strconv.Itoa(status)].(map[string]any)
		if !ok {
			t.Errorf("the votes route does not document status %d (%s)", status, r)
			continue
		}
		desc, _ := resp["description"].(string)
		if ref, ok := resp["$ref"].(string); ok {
			desc, _ = at(t, doc, "components", "responses", strings.TrimPrefix(ref, "#/components/responses/"), "description").(string)
		}
		if !strings.Contains(desc, string(r)) {
			t.Errorf("the votes route's %d answer does not name %s: %q", status, r, desc)
		}
	}
}

// TestOpenAPIContractSchemas: openapi.json's copies of the contract's JSON
// Schemas are what contracts/schema says (rewrite them with -update), and
// the API's records, votes and timeline entries refer to them.
func TestOpenAPIContractSchemas(t *testing.T) {
	comps, err := contractSchemaComponents()
	if err != nil {
		t.Fatal(err)
	}
	if *updateOpenAPI {
		if err := writeOpenAPI(comps); err != nil {
			t.Fatal(err)
		}
	}
	doc := readOpenAPI(t)
	schemas := at(t, doc, "components", "schemas").(map[string]any)
	for _, c := range comps {
		want := fromOrdered(c.Value)
		if !reflect.DeepEqual(schemas[c.Key], want) {
			got, _ := json.Marshal(schemas[c.Key])
			wantJSON, _ := json.Marshal(want)
			t.Errorf("components/schemas/%s differs from contracts/schema (run go test ./services/api -run TestOpenAPIContractSchemas -update):\n got %s\nwant %s", c.Key, got, wantJSON)
		}
	}
	for path, want := range map[string]string{
		"components/schemas/RecordAnswer/properties/record/$ref": "#/components/schemas/ApprovalRecord",
	} {
		if got := at(t, doc, strings.Split(path, "/")...); got != want {
			t.Errorf("%s: %v, want %s", path, got, want)
		}
	}
	// Every $ref of the document resolves.
	ordered := toOrdered(doc)
	walkSchemas(doc, "", func(path string, v map[string]any) {
		ref, ok := v["$ref"].(string)
		if !ok {
			return
		}
		if _, ok := resolvePointer(ordered, strings.TrimPrefix(ref, "#")); !strings.HasPrefix(ref, "#/") || !ok {
			t.Errorf("%s: $ref %s does not resolve", path, ref)
		}
	})
}

// walkSchemas calls f for every object in v, with its path.
func walkSchemas(v any, path string, f func(path string, v map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(path, v)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			walkSchemas(v[k], path+"/"+k, f)
		}
	case []any:
		for i, e := range v {
			walkSchemas(e, path+"/"+strconv.Itoa(i), f)
		}
	}
}

// TestOpenAPIFitForGenerators: the document gives client generators what
// they need: every operation has a unique operationId and declared tags,
// the server URL is relative (the API is served wherever it runs), and
// every free-form object says so, so that it is not typed as an object
// with no keys.
func TestOpenAPIFitForGenerators(t *testing.T) {
	doc := readOpenAPI(t)

	servers := at(t, doc, "servers").([]any)
	for _, s := range servers {
		if u, _ := s.(map[string]any)["url"].(string); !strings.HasPrefix(u, "/") {
			t.Errorf("server URL %q is not relative", u)
		}
	}
	tags := map[string]bool{}
	for _, tag := range at(t, doc, "tags").([]any) {
		tags[tag.(map[string]any)["name"].(string)] = true
	}
	ids := map[string]string{}
	used := map[string]bool{}
	for path, item := range at(t, doc, "paths").(map[string]any) {
		for method, op := range item.(map[string]any) {
			op, ok := op.(map[string]any)
			if !ok {
				continue
			}
			where := method + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s has no operationId", where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s and %s share the operationId %s", where, other, id)
			}
			ids[id] = where
			opTags, _ := op["tags"].([]any)
			if len(opTags) == 0 {
				t.Errorf("%s has no tag", where)
			}
			for _, tag := range opTags {
				used[tag.(string)] = true
				if !tags[tag.(string)] {
					t.Errorf("%s: tag %v is not declared in tags", where, tag)
				}
			}
		}
	}
	for tag := range tags {
		if !used[tag] {
			t.Errorf("tag %s is declared but no operation has it", tag)
		}
	}

	// Free-form values: an object schema without properties says
	// additionalProperties; a schema that says nothing at all ({}) is only
	// where any JSON value is right.
	anyJSON := map[string]bool{
		"/components/schemas/PatchOp/properties/value": true,
	}
	walkSchemas(at(t, doc, "components"), "/components", func(path string, v map[string]any) {
		if isSchemaContainer(path) {
			return
		}
		if typ, ok := v["type"]; ok && hasType(typ, "object") {
			_, props := v["properties"]
			_, addl := v["additionalProperties"]
			if !props && !addl {
				t.Errorf("%s: an object without properties must say additionalProperties", path)
			}
		}
		if addl, ok := v["additionalProperties"]; ok && addl == false {
			if _, props := v["properties"]; !props {
				t.Errorf("%s: additionalProperties false with no properties admits only {}", path)
			}
		}
		if len(v) == 0 || onlyDocs(v) {
			if !anyJSON[path] {
				t.Errorf("%s: a schema without a type (generators make it unknown); give it one", path)
			}
		}
	})
	walkSchemas(at(t, doc, "paths"), "/paths", func(path string, v map[string]any) {
		if s, ok := v["schema"].(map[string]any); ok {
			if typ, ok := s["type"]; ok && hasType(typ, "object") {
				if _, ok := s["additionalProperties"]; !ok {
					if _, ok := s["properties"]; !ok {
						t.Errorf("%s/schema: an object without properties must say additionalProperties", path)
					}
				}
			}
		}
	})
}

// isSchemaContainer reports whether the object at path holds schemas by
// name (properties, $defs, components/schemas...) rather than being one.
func isSchemaContainer(path string) bool {
	for _, suffix := range []string{"/properties", "/$defs", "/patternProperties", "/components", "/components/schemas",
		"/components/responses", "/components/parameters", "/components/securitySchemes"} {
		if strings.HasSuffix(path, suffix) {
			return true
		}
	}
	return strings.HasPrefix(path, "/components/responses") || strings.HasPrefix(path, "/components/parameters") ||
		strings.HasPrefix(path, "/components/securitySchemes")
}

func hasType(typ any, want string) bool {
	switch typ := typ.(type) {
	case string:
		return typ == want
	case []any:
		return slices.Contains(typ, any(want))
	}
	return false
}

// onlyDocs reports whether a schema has nothing but annotations.
func onlyDocs(v map[string]any) bool {
	for k := range v {
		switch k {
		case "description", "title", "examples", "default":
		default:
			return false
		}
	}
	return true
}

// TestOpenAPIHasNoDuplicateKeys: every JSON reader sees the same document
// (a duplicate key is read differently by different parsers).
func TestOpenAPIHasNoDuplicateKeys(t *testing.T) {
	data, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := contracts.CheckDuplicateKeys(data); err != nil {
		t.Fatal(err)
	}
}

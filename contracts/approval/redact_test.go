package approval_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
)

func TestParsePointer(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "/ssn", want: []string{"ssn"}},
		{in: "/a~1b/t~0n/0", want: []string{"a/b", "t~n", "0"}},
		{in: "/", want: []string{""}},
		{in: "ssn", bad: true},
		{in: "/a~2", bad: true},
		{in: "/a~", bad: true},
	} {
		got, err := approval.ParsePointer(c.in)
		if c.bad {
			if !errors.Is(err, approval.ErrBadPointer) {
				t.Errorf("ParsePointer(%q) error %v, want ErrBadPointer", c.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParsePointer(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestExpandPointers(t *testing.T) {
	args := json.RawMessage(`{"ssn":"1","card":{"number":"4","exp":"12"},"items":[{"iban":"A"},{"iban":"B"},{"x":1}],"a/b":2}`)
	for _, c := range []struct {
		patterns []string
		want     []string
	}{
		{[]string{"/ssn"}, []string{"/ssn"}},
		{[]string{"/card/*"}, []string{"/card/exp", "/card/number"}},
		{[]string{"/items/*/iban"}, []string{"/items/0/iban", "/items/1/iban"}},
		{[]string{"/items/1"}, []string{"/items/1"}},
		{[]string{"/items/01", "/items/3", "/nope", "/ssn/deeper"}, nil},
		{[]string{"/a~1b", "/ssn", "/ssn"}, []string{"/a~1b", "/ssn"}},
		{[]string{"/*"}, []string{"/a~1b", "/card", "/items", "/ssn"}},
	} {
		if got := approval.ExpandPointers(args, c.patterns); !slices.Equal(got, c.want) {
			t.Errorf("ExpandPointers(%q) = %q, want %q", c.patterns, got, c.want)
		}
	}
}

func TestSchemaPointers(t *testing.T) {
	schema := json.RawMessage(`{
	  "type": "object",
	  "$defs": {"secret": {"type": "string", "x-sensitive": true}},
	  "properties": {
	    "ssn": {"type": "string", "x-sensitive": true},
	    "password": {"type": "string", "writeOnly": true},
	    "card": {"type": "object", "properties": {"number": {"$ref": "#/$defs/secret"}, "exp": {"type": "string"}}},
	    "items": {"type": "array", "items": {"properties": {"iban": {"x-sensitive": true}}}},
	    "pair": {"prefixItems": [{"type": "string"}, {"writeOnly": true}]},
	    "either": {"anyOf": [{"type": "string"}, {"properties": {"pin": {"x-sensitive": true}}}]},
	    "name": {"type": "string", "x-sensitive": false}
	  },
	  "additionalProperties": {"properties": {"token": {"writeOnly": true}}}
	}`)
	args := json.RawMessage(`{"ssn":"1","card":{"number":"4","exp":"12"},"items":[{"iban":"A"},{"iban":"B"}],
	  "pair":["a","b"],"either":{"pin":"0000"},"name":"ann","extra":{"token":"t"}}`)
	want := []string{"/card/number", "/either/pin", "/extra/token", "/items/0/iban", "/items/1/iban", "/pair/1", "/ssn"}
	if got := approval.SchemaPointers(schema, args); !slices.Equal(got, want) {
		t.Errorf("SchemaPointers = %q, want %q", got, want)
	}
	// A schema that refers to itself ends.
	loop := json.RawMessage(`{"properties": {"a": {"$ref": "#"}}}`)
	deep := json.RawMessage(`{"a":{"a":{"a":{}}}}`)
	if got := approval.SchemaPointers(loop, deep); got != nil {
		t.Errorf("SchemaPointers(loop) = %q", got)
	}
	if got := approval.SensitivePointers(args, schema, []string{"/name", "/ssn"}); !slices.Contains(got, "/name") || len(got) != len(want)+1 {
		t.Errorf("SensitivePointers = %q", got)
	}
}

func TestRedact(t *testing.T) {
	args := json.RawMessage(`{"amount":12.50,"card":{"exp":"12/30","number":"4111"},"items":[{"iban":"DE00"},1],"ssn":"123-45-6789"}`)
	got := approval.Redact(args, []string{"/ssn", "/card/number", "/items/0", "/absent"})
	want := `{"amount":12.50,"card":{"exp":"12/30","number":"••••"},"items":["••••",1],"ssn":"••••"}`
	if string(got) != want {
		t.Errorf("Redact = %s\nwant      %s", got, want)
	}
	if got := approval.Redact(args, nil); string(got) != string(args) {
		t.Errorf("Redact without pointers changed the arguments: %s", got)
	}
	if got := approval.Redact(json.RawMessage(`{"ssn":`), []string{"/ssn"}); string(got) != `"••••"` {
		t.Errorf("Redact of invalid JSON = %s, want the mask", got)
	}
}

func TestRedactDiff(t *testing.T) {
	from := json.RawMessage(`{"amount":10,"card":{"number":"4111","exp":"12/30"},"ssn":"123-45-6789"}`)
	to := json.RawMessage(`{"amount":20,"card":{"number":"5500","exp":"01/31"},"ssn":"987-65-4321","new":{"pin":"0000","label":"x"}}`)
	ps := []string{"/ssn", "/card/number", "/new/pin"}
	got := string(approval.RedactDiff(approval.Diff(from, to), ps))
	for _, secret := range []string{"4111", "5500", "123-45-6789", "987-65-4321", "0000"} {
		if strings.Contains(got, secret) {
			t.Errorf("RedactDiff shows %q: %s", secret, got)
		}
	}
	var ops []map[string]any
	if err := json.Unmarshal([]byte(got), &ops); err != nil {
		t.Fatal(err)
	}
	paths := map[string]any{}
	for _, op := range ops {
		paths[op["path"].(string)] = op["value"]
	}
	// The changed sensitive fields are still named, and the rest as is.
	if paths["/ssn"] != approval.Mask || paths["/card/number"] != approval.Mask || paths["/amount"] != float64(20) ||
		paths["/card/exp"] != "01/31" {
		t.Errorf("RedactDiff = %s", got)
	}
	if nv, _ := paths["/new"].(map[string]any); nv["label"] != "x" || nv["pin"] != approval.Mask {
		t.Errorf("an added object keeps its plain values and masks its sensitive ones: %s", got)
	}
	// A whole replacement (Diff of a value that is no object).
	whole := approval.RedactDiff(approval.Diff(json.RawMessage(`[`), to), ps)
	if strings.Contains(string(whole), "987-65-4321") || !json.Valid(whole) {
		t.Errorf("RedactDiff of a whole replacement = %s", whole)
	}
}

func TestRedactRecordHumanInputAnswerUntouched(t *testing.T) {
	rec := contracts.Record{Request: contracts.ApprovalRequested{Kind: contracts.KindHumanInput, Sensitive: []string{"/a"}},
		Outcome: &contracts.Outcome{Decision: contracts.DecisionAnswer, Arguments: json.RawMessage(`{"a":1}`)}}
	if got := approval.RedactRecord(rec); string(got.Outcome.Arguments) != `{"a":1}` {
		t.Errorf("an answer is not tool arguments: %s", got.Outcome.Arguments)
	}
}

// An edit that adds a sensitive value the request never had (an IBAN) is
// masked by the pointers the arbiter adds to the record, in the edit vote,
// the outcome and the diff, and no arguments hash is left to confirm a
// guess of it.
func TestRedactRecordMasksWhatAnEditAdded(t *testing.T) {
	const secret = "DE-EDITED-SECRET-IBAN"
	reqArgs := json.RawMessage(`{"amount":10,"ssn":"123-45-6789"}`)
	edited := json.RawMessage(`{"amount":10,"iban":"` + secret + `","ssn":"123-45-6789"}`)
	reqSHA, _ := contracts.ArgumentsSHA256(reqArgs)
	editSHA, _ := contracts.ArgumentsSHA256(edited)
	rec := contracts.Record{
		Request: contracts.ApprovalRequested{Kind: contracts.KindToolApproval, Sensitive: []string{"/ssn"},
			ToolCall: &contracts.ToolCall{Name: "pay", Arguments: reqArgs, ArgumentsSHA256: reqSHA}},
		Votes: []contracts.Vote{{Decision: contracts.DecisionEdit, Arguments: edited, ArgumentsSHA256: reqSHA}},
		Outcome: &contracts.Outcome{Decision: contracts.DecisionEdit, Arguments: edited, ArgumentsSHA256: editSHA,
			Diff: approval.Diff(reqArgs, edited)},
	}
	rec = approval.AddSensitive(rec, []string{"/iban", "/ssn"})
	if !slices.Equal(rec.Sensitive, []string{"/iban"}) {
		t.Fatalf("Sensitive %q, want only what the request does not list", rec.Sensitive)
	}
	if got := approval.RecordSensitive(&rec); !slices.Equal(got, []string{"/iban", "/ssn"}) {
		t.Fatalf("RecordSensitive %q", got)
	}
	red := approval.RedactRecord(rec)
	all, err := json.Marshal(red)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{secret, "123-45-6789", reqSHA, editSHA} {
		if strings.Contains(string(all), leak) {
			t.Fatalf("the redacted record shows %q: %s", leak, all)
		}
	}
	if !strings.Contains(string(red.Outcome.Diff), `"/iban"`) {
		t.Fatalf("the diff no longer says which field changed: %s", red.Outcome.Diff)
	}
	if !slices.Equal(red.Request.Sensitive, []string{"/ssn"}) {
		t.Fatalf("the request's own list changed: %q", red.Request.Sensitive)
	}
	// The pointer "" (an edit whose pointers could not be computed) masks
	// every arguments value whole.
	whole := approval.RedactRecord(approval.AddSensitive(rec, []string{""}))
	if string(whole.Outcome.Arguments) != `"`+approval.Mask+`"` || string(whole.Votes[0].Arguments) != `"`+approval.Mask+`"` {
		t.Fatalf("not masked whole: %s, %s", whole.Outcome.Arguments, whole.Votes[0].Arguments)
	}
}

package policy_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const fieldsPolicy = `
version: f1
default_rule:
  sensitive_fields: 'path.startsWith("/auth/")'
rules:
  - name: crm
    tools: [crm.*]
    action: require_approval
    sensitive_fields: 'field.matches("(?i)^(ssn|password|iban)$")'
    sensitive: [/note]
`

// sensitive_fields masks the fields its expression holds true for, by
// name, wherever they are in the arguments, with the rule's and
// default_rule's expressions and the sensitive pointers together.
func TestSensitiveFieldsByName(t *testing.T) {
	p, err := policy.Parse([]byte(fieldsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"name":"Ann","SSN":"1","contacts":[{"iban":"DE00","tel":"5"}],` +
		`"login":{"Password":{"v":"x"}},"auth":{"token":"t","n":[1]},"note":"n","count":3}`)
	d := p.Evaluate(policy.Input{Tool: "crm.update", Arguments: args})
	got := d.SensitivePointers(args, nil)
	want := []string{"/SSN", "/auth/n", "/auth/token", "/contacts/0/iban", "/login/Password", "/note"}
	if !slices.Equal(got, want) {
		t.Fatalf("SensitivePointers = %q, want %q", got, want)
	}
	// A field whose name is a number, or has / and ~ in it, gets an escaped pointer.
	odd := json.RawMessage(`{"a/b":{"ssn":1},"t~x":{"password":2}}`)
	if got := d.SensitivePointers(odd, nil); !slices.Equal(got, []string{"/a~1b/ssn", "/t~0x/password"}) {
		t.Fatalf("escaped pointers %q", got)
	}
}

// The arbiter's check of a request runs the expression again: a request
// that masks less than it demands is refused, one that masks it all passes.
func TestVerifyRequestSensitiveFields(t *testing.T) {
	p, err := policy.Parse([]byte(fieldsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	req := snapshot(t, p, toolRequest("crm.update", `{"ssn":"123-45-6789","name":"Ann"}`), nil)
	d := p.Evaluate(policy.RequestInput(&req))
	req.Sensitive = d.SensitivePointers(req.ToolCall.Arguments, req.ToolSchema)
	if !slices.Equal(req.Sensitive, []string{"/ssn"}) {
		t.Fatalf("sensitive %q", req.Sensitive)
	}
	if err := policy.VerifyRequest(&req, d, verifyOpts); err != nil {
		t.Fatalf("a request masking what the rule demands is refused: %v", err)
	}
	req.Sensitive = nil
	err = policy.VerifyRequest(&req, d, verifyOpts)
	var re *policy.RequestError
	if !errors.As(err, &re) || re.Reason != contracts.RefusalWeakerThanPolicy || !strings.Contains(err.Error(), `"/ssn"`) ||
		strings.Contains(err.Error(), "123-45-6789") {
		t.Fatalf("a request masking nothing: %v, want weaker_than_policy naming /ssn and no value", err)
	}
}

func TestSensitiveFieldsParseErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"not a bool", `
rules:
  - name: crm
    tools: [crm.*]
    action: require_approval
    sensitive_fields: 'field + "x"'
`, `6:23: rule "crm": sensitive_fields: the expression must be a bool`},
		{"unknown variable", `
rules:
  - name: crm
    tools: [crm.*]
    action: require_approval
    sensitive_fields: 'args.ssn == "1"'
`, `6:23: rule "crm": sensitive_fields: `},
		{"not in risk_defaults", `
risk_defaults:
  high:
    sensitive_fields: 'true'
`, `4:5: unknown field "sensitive_fields" in risk_defaults.high`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(c.src))
			var errs *policy.Errors
			if !errors.As(err, &errs) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse error:\n%v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

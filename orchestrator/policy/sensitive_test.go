package policy_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/orchestrator/policy"
)

const sensitivePolicy = `
version: s1
default_rule:
  sensitive: [/api_key]
rules:
  - name: payroll
    tools: [payroll.pay]
    action: require_approval
    sensitive: [/ssn, "/card/*", /items/*/iban]
  - name: lookups
    tools: [people.lookup]
    when: args.id != ""
    action: allow
    sensitive: [/ssn]
  - name: plain
    tools: [notes.write]
    action: require_approval
`

func TestSensitiveSetting(t *testing.T) {
	p, err := policy.Parse([]byte(sensitivePolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool, args string
		want       []string
	}{
		// The rule's patterns and default_rule's, together.
		{"payroll.pay", `{}`, []string{"/ssn", "/card/*", "/items/*/iban", "/api_key"}},
		{"notes.write", `{}`, []string{"/api_key"}},
		// A rule that allows gates when its condition errors, and still
		// masks what it names.
		{"people.lookup", `{"ssn":"1"}`, []string{"/ssn", "/api_key"}},
		{"people.lookup", `{"id":"7"}`, nil},
	} {
		d := p.Evaluate(policy.Input{Tool: c.tool, Arguments: json.RawMessage(c.args)})
		if d.Action == policy.ActionAllow {
			continue
		}
		if !slices.Equal(d.Sensitive, c.want) {
			t.Errorf("%s %s: Sensitive = %q, want %q", c.tool, c.args, d.Sensitive, c.want)
		}
	}
	// A decision's patterns are the caller's to change.
	d := p.Evaluate(policy.Input{Tool: "payroll.pay"})
	d.Sensitive[0] = "/changed"
	if again := p.Evaluate(policy.Input{Tool: "payroll.pay"}); again.Sensitive[0] != "/ssn" {
		t.Errorf("changing a decision changed the policy: %q", again.Sensitive)
	}
}

func TestSensitiveParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"not a pointer", `
rules:
  - name: payroll
    tools: [payroll.pay]
    action: require_approval
    sensitive: [ssn]
`, `6:17: rule "payroll": sensitive[0]: "ssn" is not a JSON pointer into the arguments`},
		{"bad escape", `
rules:
  - name: payroll
    tools: [payroll.pay]
    action: require_approval
    sensitive:
      - /ok
      - /a~2b
`, `8:9: rule "payroll": sensitive[1]: "/a~2b" is not a JSON pointer`},
		{"twice", `
rules:
  - name: payroll
    tools: [payroll.pay]
    action: require_approval
    sensitive: [/ssn, /ssn]
`, `6:23: rule "payroll": sensitive[1]: "/ssn" is listed twice`},
		{"not a list", `
default_rule:
  sensitive: /ssn
`, `3:14: default_rule: sensitive must be a list of strings`},
		{"not in risk_defaults", `
risk_defaults:
  high:
    sensitive: [/ssn]
`, `4:5: unknown field "sensitive" in risk_defaults.high`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(c.src))
			var errs *policy.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error %v, want *policy.Errors", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse error:\n%v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

func TestSensitiveOnAnAllowRuleWithoutConditionIsWarned(t *testing.T) {
	ps := policy.Lint([]byte(`
rules:
  - name: reads
    tools: [db.read]
    action: allow
    sensitive: [/ssn]
`))
	if len(ps) != 1 || !strings.Contains(ps[0].String(), `6:5: rule "reads": sensitive has no effect on a rule whose action is allow`) {
		t.Errorf("Lint = %v", ps)
	}
}

func TestVerifyRequestSensitive(t *testing.T) {
	p, err := policy.Parse([]byte(sensitivePolicy))
	if err != nil {
		t.Fatal(err)
	}
	args := `{"ssn":"123-45-6789","card":{"number":"4111","exp":"12/30"},"items":[{"iban":"DE00"}],"amount":5}`
	req := snapshot(t, p, toolRequest("payroll.pay", args), nil)
	req.ToolSchema = json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","x-sensitive":true}}}`)
	d := p.Evaluate(policy.RequestInput(&req))
	full := approval.SensitivePointers(req.ToolCall.Arguments, req.ToolSchema, d.Sensitive)
	if want := []string{"/amount", "/card/exp", "/card/number", "/items/0/iban", "/ssn"}; !slices.Equal(full, want) {
		t.Fatalf("SensitivePointers = %q, want %q", full, want)
	}
	req.Sensitive = full
	if err := policy.VerifyRequest(&req, d, verifyOpts); err != nil {
		t.Fatalf("a request masking what the rule demands is refused: %v", err)
	}
	// Masking more is fine.
	req.Sensitive = append(slices.Clone(full), "/other")
	if err := policy.VerifyRequest(&req, d, verifyOpts); err != nil {
		t.Fatalf("a request masking more is refused: %v", err)
	}
	for _, drop := range full {
		req.Sensitive = slices.DeleteFunc(slices.Clone(full), func(p string) bool { return p == drop })
		err := policy.VerifyRequest(&req, d, verifyOpts)
		var re *policy.RequestError
		if !errors.As(err, &re) || re.Reason != contracts.RefusalWeakerThanPolicy ||
			!strings.Contains(err.Error(), `sensitive does not list "`+drop+`"`) {
			t.Errorf("without %s: %v, want a weaker_than_policy refusal naming it", drop, err)
			continue
		}
		if strings.Contains(err.Error(), "123-45-6789") || strings.Contains(err.Error(), "4111") {
			t.Errorf("the refusal shows a value: %v", err)
		}
	}
}

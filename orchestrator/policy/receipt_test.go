package policy_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/orchestrator/policy"
)

const receiptPolicy = `
version: r1
rules:
  - name: reads
    tools: ["files.read"]
    action: allow
    receipt: true
  - name: small
    tools: ["payments.send"]
    when: 'args.amount <= 10'
    action: allow
    receipt: true
  - name: lists
    tools: ["files.list"]
    action: allow
`

func TestReceiptSetting(t *testing.T) {
	p, err := policy.Parse([]byte(receiptPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in := func(tool, args string) policy.Decision {
		return p.Evaluate(policy.Input{Run: contracts.Run{Agent: "a"}, Tool: tool, Arguments: json.RawMessage(args)})
	}
	if d := in("files.read", `{}`); d.Action != policy.ActionAllow || !d.Receipt {
		t.Fatalf("files.read: %s receipt=%v, want allow with a receipt", d.Action, d.Receipt)
	}
	if d := in("files.list", `{}`); d.Receipt {
		t.Fatal("files.list: a rule without receipt: true asks for a receipt")
	}
	// A condition that errors gates the call: no receipt for the policy.
	if d := in("payments.send", `{}`); d.Action != policy.ActionRequireApproval || d.Receipt {
		t.Fatalf("payments.send with an erroring condition: %s receipt=%v, want require_approval and no policy receipt", d.Action, d.Receipt)
	}
	if d := in("payments.send", `{"amount": 5}`); !d.Receipt {
		t.Fatal("payments.send under the condition: no receipt")
	}
	// The default never signs.
	if d := in("other", `{}`); d.Receipt {
		t.Fatal("the default asks for a receipt")
	}
}

func TestReceiptLint(t *testing.T) {
	for name, tc := range map[string]struct{ policy, want string }{
		"not a bool": {`
rules:
  - name: r
    tools: ["t"]
    action: allow
    receipt: "yes"
`, `rule "r": receipt must be true or false`},
		"on a gated rule": {`
rules:
  - name: r
    tools: ["t"]
    action: require_approval
    receipt: true
`, `rule "r": receipt has no effect on a rule whose action is require_approval`},
		"on a deny rule": {`
rules:
  - name: r
    tools: ["t"]
    action: deny
    receipt: true
`, `rule "r": receipt has no effect on a rule whose action is deny`},
		"on default_rule": {`
default_rule:
  receipt: true
`, `unknown field "receipt" in default_rule`},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, pr := range policy.Lint([]byte(tc.policy)) {
				got = append(got, pr.String())
			}
			if !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Fatalf("problems:\n%s\nwant one containing %q", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}

package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// shadowedPolicies are the example and shipped policies the shadow
// property is held over, with the cases file of each where there is one.
func shadowedPolicies(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"../../deploy/policy.yaml", "../../deploy/policies/*.yaml", "testdata/*/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, ".cases.yaml") {
				files = append(files, f)
			}
		}
	}
	if len(files) < 8 {
		t.Fatalf("found only %d policies: %v", len(files), files)
	}
	return files
}

// TestShadowRulesChangeNoVerdict is the property behind "a shadow rule is
// never enforced": for every example and shipped policy, shadow rules of
// every kind (allowing everything, denying a tool the policy names,
// gating with the strictest settings, copies of the policy's own rules
// with another action, conditions that hold, fail or error) inserted at
// random places leave every decision exactly as the policy without them
// gives it — Evaluate, EvaluateShadow and Explain (less its shadow steps)
// alike; only the deciding rule's line moves with the lines inserted.
func TestShadowRulesChangeNoVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261201, 7))
	for _, file := range shadowedPolicies(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			base, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			calls := shadowCalls(t, file, data, rng)
			recorded := 0
			for round := range 6 {
				shadowed := withShadowRules(t, data, rng)
				p, err := Parse(shadowed)
				if err != nil {
					t.Fatalf("round %d: %v\n%s", round, err, shadowed)
				}
				if len(p.ShadowRules()) == 0 {
					t.Fatalf("round %d: no shadow rule inserted", round)
				}
				for _, in := range calls {
					recorded += checkSameVerdict(t, base, p, in)
				}
			}
			if recorded == 0 {
				t.Errorf("no shadow rule recorded a verdict on %d calls", len(calls))
			}
			t.Logf("%d calls, 6 placements of shadow rules, %d shadow verdicts", len(calls), recorded)
		})
	}
}

// checkSameVerdict holds p (base with shadow rules) to base's decision of in.
func checkSameVerdict(t *testing.T, base, p *Policy, in Input) (recorded int) {
	t.Helper()
	want := base.Evaluate(in)
	want.Line = ruleLine(p, want.Rule)
	got := p.Evaluate(in)
	withShadow, verdicts := p.EvaluateShadow(context.Background(), in)
	explained, steps := p.Explain(in)
	for what, d := range map[string]Decision{"Evaluate": got, "EvaluateShadow": withShadow, "Explain": explained} {
		if diff := decisionDiff(d, want); diff != "" {
			t.Fatalf("%s of %s %s by %s: %s", what, in.Tool, in.Arguments, in.Run.Agent, diff)
		}
	}
	_, baseSteps := base.Explain(in)
	var enforced []string
	for _, s := range steps {
		if !s.Shadow {
			enforced = append(enforced, s.Rule+":"+s.Why)
		}
	}
	var wantSteps []string
	for _, s := range baseSteps {
		wantSteps = append(wantSteps, s.Rule+":"+s.Why)
	}
	if !slices.Equal(enforced, wantSteps) {
		t.Fatalf("Explain of %s %s: steps\n%q\nwant\n%q", in.Tool, in.Arguments, enforced, wantSteps)
	}
	for _, v := range verdicts {
		if !strings.HasPrefix(v.Rule, "shadow-") {
			t.Fatalf("shadow verdict of rule %q, not a shadow rule", v.Rule)
		}
	}
	return len(verdicts)
}

// decisionDiff compares two decisions field by field; the sensitive_fields
// expressions by their source.
func decisionDiff(got, want Decision) string {
	src := func(ms []*fieldMatcher) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.src)
		}
		return out
	}
	if !slices.Equal(src(got.sensitiveFields), src(want.sensitiveFields)) {
		return fmt.Sprintf("sensitive_fields %q, want %q", src(got.sensitiveFields), src(want.sensitiveFields))
	}
	got.sensitiveFields, want.sensitiveFields = nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("got %+v\nwant %+v", got, want)
	}
	return ""
}

// ruleLine is the line of the enforcing rule named name in p (0 for the
// default).
func ruleLine(p *Policy, name string) int {
	for i := range p.rules {
		if p.rules[i].name == name {
			return p.rules[i].line
		}
	}
	return 0
}

// withShadowRules inserts one to five shadow rules at random places among
// the rules of the policy file data.
func withShadowRules(t *testing.T, data []byte, rng *rand.Rand) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	var rules *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "rules" {
			rules = root.Content[i+1]
		}
	}
	if rules == nil {
		t.Fatal("no rules")
	}
	own := slices.Clone(rules.Content)
	for i := range 1 + rng.IntN(5) {
		n := shadowRuleNode(t, i, own, rng)
		at := rng.IntN(len(rules.Content) + 1)
		rules.Content = slices.Insert(rules.Content, at, n)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shadowTemplates are shadow rules of every kind; %d is the rule's number.
var shadowTemplates = []string{
	`{name: shadow-%d, mode: shadow, tools: ["*"], action: allow}`,
	`{name: shadow-%d, mode: shadow, tools: ["*"], action: deny, reason: "Not yet."}`,
	`{name: shadow-%d, mode: shadow, tools: ["*"], action: require_approval, risk: critical, quorum: 2, approvers: [zed, yan, xia], veto: true, order: sequence, step_up: passkey}`,
	`{name: shadow-%d, mode: shadow, tools: ["*"], when: 'args.nothing_has_this > 1', action: allow}`,
	`{name: shadow-%d, mode: shadow, tools: ["*"], when: 'has(args.amount) && args.amount > 50', action: deny}`,
	`{name: shadow-%d, mode: shadow, agents: ["*bot*"], action: require_approval, risk: low}`,
	`{name: shadow-%d, mode: shadow, tools: ["*"], when: 'size(args) > 1', action: allow}`,
}

// shadowRuleNode builds shadow rule i: from a template, or a copy of one
// of the policy's own rules with another action.
func shadowRuleNode(t *testing.T, i int, own []*yaml.Node, rng *rand.Rand) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if k := rng.IntN(len(shadowTemplates) + 2); k < len(shadowTemplates) {
		if err := yaml.Unmarshal(fmt.Appendf(nil, shadowTemplates[k], i), &n); err != nil {
			t.Fatal(err)
		}
		return n.Content[0]
	}
	src, err := yaml.Marshal(own[rng.IntN(len(own))])
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(src, &n); err != nil {
		t.Fatal(err)
	}
	m := n.Content[0]
	set := func(key, value string) {
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == key {
				m.Content[j+1] = &yaml.Node{Kind: yaml.ScalarNode, Value: value}
				return
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
	}
	set("name", fmt.Sprintf("shadow-%d", i))
	set("mode", "shadow")
	if rng.IntN(2) == 0 {
		set("action", []string{ActionAllow, ActionDeny}[rng.IntN(2)])
	}
	return m
}

var argNames = regexp.MustCompile(`args\.\??([a-zA-Z_][a-zA-Z0-9_]*)`)

// shadowCalls are the calls the property is checked on: the policy's cases
// (where it has a cases file) and some of their mutated arguments, and
// random calls built from the names the policy uses — tools from its globs,
// agents, tenants, labels, and arguments its conditions read, of every type.
func shadowCalls(t *testing.T, file string, data []byte, rng *rand.Rand) []Input {
	t.Helper()
	var calls []Input
	if cdata, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".cases.yaml"); err == nil {
		cases, err := ParseCases(cdata)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			calls = append(calls, Input{Run: c.Run, Tool: c.Tool, Arguments: c.Arguments})
			ms := mutations(t, c.Arguments, rng)
			for range min(4, len(ms)) {
				calls = append(calls, Input{Run: c.Run, Tool: c.Tool, Arguments: ms[rng.IntN(len(ms))].args})
			}
		}
	}
	words := policyWords(data)
	var fields []string
	for _, m := range argNames.FindAllStringSubmatch(string(data), -1) {
		fields = append(fields, m[1])
	}
	fields = append(fields, "amount", "path", "to")
	values := []any{0, 1, 51, 99.5, 10000, -3, "", "EUR", "prod", "/etc/passwd", true, false, nil, []any{}, []any{"a", 2}, map[string]any{"x": 1}}
	for range 300 {
		args := map[string]any{}
		for range rng.IntN(5) {
			args[fields[rng.IntN(len(fields))]] = values[rng.IntN(len(values))]
		}
		raw, _ := json.Marshal(args)
		run := contracts.Run{Agent: pick(rng, words, "billing-bot"), Tenant: pick(rng, words, "")}
		if rng.IntN(2) == 0 {
			run.Labels = map[string]string{pick(rng, words, "env"): pick(rng, words, "prod")}
		}
		calls = append(calls, Input{Run: run, Tool: pick(rng, words, "unknown.tool"), Arguments: raw})
	}
	return calls
}

// policyWords are the globs and values the policy file names, with their
// wildcards filled in.
func policyWords(data []byte) []string {
	var words []string
	for _, m := range regexp.MustCompile(`"([^"\s]{1,60})"|\b([a-z][a-zA-Z0-9_.*?-]{1,40})\b`).FindAllStringSubmatch(string(data), -1) {
		w := m[1] + m[2]
		w = strings.ReplaceAll(strings.ReplaceAll(w, "*", "x"), "?", "y")
		words = append(words, w)
	}
	return words
}

func pick(rng *rand.Rand, words []string, fallback string) string {
	if len(words) == 0 || rng.IntN(5) == 0 {
		return fallback
	}
	return words[rng.IntN(len(words))]
}

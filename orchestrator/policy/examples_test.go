package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/orchestrator/policy"
)

// TestExamples loads every example policy, lints it (no errors and no
// warnings: the examples are what people copy) and runs its cases.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../deploy/policies/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, ".cases.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range policy.Lint(data) {
				t.Errorf("lint: %s:%s (%s)", file, p, p.Severity)
			}
			p, err := policy.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			casesFile := strings.TrimSuffix(file, ".yaml") + ".cases.yaml"
			data, err = os.ReadFile(casesFile)
			if err != nil {
				t.Fatalf("every example has cases: %v", err)
			}
			cases, err := policy.ParseCases(data)
			if err != nil {
				t.Fatal(err)
			}
			covered := map[string]bool{}
			for _, r := range policy.RunCases(p, cases) {
				covered[r.Got.Rule] = true
				if !r.Pass {
					t.Errorf("%s:%d: case %q:\n%s\nsteps:", casesFile, r.Case.Line, r.Case.Name, r.Diff)
					for _, s := range r.Steps {
						t.Logf("  %+v", s)
					}
				}
			}
			// The cases decide by every rule at least once.
			for _, rule := range p.RuleNames() {
				if !covered[rule] {
					t.Errorf("no case is decided by rule %q", rule)
				}
			}
		})
	}
	for _, want := range []string{"payments", "email", "database", "filesystem"} {
		if !seen[want] {
			t.Errorf("deploy/policies/%s.yaml is missing", want)
		}
	}
}

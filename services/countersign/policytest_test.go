package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPolicyTestNamesLinesOnlyForRules: `policy test -v` explains each step
// with the line of the rule it tried; the default, which no line names, is
// shown without one (not "line 0").
func TestPolicyTestNamesLinesOnlyForRules(t *testing.T) {
	var out bytes.Buffer
	err := cmdPolicy([]string{"test", "-v", "../../deploy/policies/payments.yaml", "../../deploy/policies/payments.cases.yaml"}, &out)
	if err != nil {
		t.Fatalf("policy test: %v\n%s", err, out.String())
	}
	text := out.String()
	if strings.Contains(text, "(line 0)") || !strings.Contains(text, "→ default: no rule matched") {
		t.Errorf("policy test -v:\n%s", text)
	}
	if !strings.Contains(text, "small-payments (line ") {
		t.Errorf("policy test -v names no rule's line:\n%s", text)
	}
}

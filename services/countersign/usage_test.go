package main

import (
	"bytes"
	"errors"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// clientOnly are the flags every API command has; the overview leaves them
// to --help.
var clientOnly = []string{"url", "token", "data", "json"}

// synopsisFlag finds the flags a synopsis names: --name or -n.
var synopsisFlag = regexp.MustCompile(`(?:^|[\s\[|])--?([a-z][a-z0-9-]*)`)

// helpFlag finds the flags in PrintDefaults' output.
var helpFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// Every command's --help prints its usage and exits 0, and the overview
// names exactly the flags the command's flag set defines.
func TestUsageMatchesTheFlagSets(t *testing.T) {
	overview := usageText("")
	for _, c := range commands {
		t.Run(c.path, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(append(strings.Fields(c.path), "--help"), &out, &errOut)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("--help: %v\n%s", err, errOut.String())
			}
			help := out.String()
			if !strings.HasPrefix(help, "Usage: countersign "+c.path) {
				t.Fatalf("--help does not start with the usage line:\n%s", help)
			}
			if line := strings.TrimSpace("countersign " + c.path + " " + c.synopsis); !strings.Contains(overview, line) {
				t.Errorf("the overview lacks %q", line)
			}
			defined := map[string]bool{}
			for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
				defined[m[1]] = true
			}
			named := map[string]bool{}
			for _, m := range synopsisFlag.FindAllStringSubmatch(c.synopsis, -1) {
				named[m[1]] = true
				if !defined[m[1]] {
					t.Errorf("the usage names --%s, which %q does not define", m[1], c.path)
				}
			}
			if strings.Contains(c.synopsis, "[flags]") {
				return
			}
			for f := range defined {
				if !named[f] && !slices.Contains(clientOnly, f) {
					t.Errorf("%q defines --%s, which its usage line does not name", c.path, f)
				}
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approvals", "--help"}, "countersign approvals ls"},
		{[]string{"policy", "-h"}, "countersign policy lint"},
		{[]string{"token", "--help"}, "countersign token new"},
		{[]string{"help", "approvals", "show"}, "Usage: countersign approvals show ID"},
		{[]string{"--help"}, "countersign demo [--session NAME]"},
	} {
		var out, errOut bytes.Buffer
		if err := run(tc.args, &out, &errOut); err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%v: %v", tc.args, err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%v printed no %q:\n%s", tc.args, tc.want, out.String())
		}
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/policy"
)

// policyInfo is the API's answer on /v1/policy.
type policyInfo struct {
	Version   string           `json:"version"`
	SHA256    string           `json:"sha256"`
	AppliedBy string           `json:"applied_by"`
	AppliedAt time.Time        `json:"applied_at"`
	Revision  uint64           `json:"revision"`
	Live      bool             `json:"live"`
	Source    string           `json:"source"`
	Changed   *bool            `json:"changed"`
	Warnings  []policy.Problem `json:"warnings"`
	// DirectoryGroups are the groups the server's approver directory gives
	// members.
	DirectoryGroups []string `json:"directory_groups"`
	// StoppedGrants are the active grants the version no longer permits.
	StoppedGrants []stoppedGrant `json:"stopped_grants"`
}

type stoppedGrant struct {
	GrantID string `json:"grant_id"`
	Tool    string `json:"tool"`
	Agent   string `json:"agent"`
	Tenant  string `json:"tenant"`
	RunID   string `json:"run_id"`
	Scope   string `json:"scope"`
	Rule    string `json:"rule"`
	NewRule string `json:"new_rule"`
	Reason  string `json:"reason"`
}

// printStoppedGrants names the active grants a version stops (or, in a dry
// run, would stop).
func printStoppedGrants(out io.Writer, gs []stoppedGrant, dryRun bool) {
	if len(gs) == 0 {
		return
	}
	verb := "stops"
	if dryRun {
		verb = "would stop"
	}
	fmt.Fprintf(out, "This version %s %d active grant(s); they allow no call under it:\n", verb, len(gs))
	for _, g := range gs {
		where := "agent " + g.Agent
		if g.Tenant != "" {
			where += ", tenant " + g.Tenant
		}
		if g.RunID != "" {
			where += ", run " + g.RunID
		}
		why := "rule " + g.Rule + " no longer permits its scope, lifetime or arguments"
		if g.Reason == "rule changed" {
			why = "its calls are now decided by rule " + g.NewRule + ", not " + g.Rule
		}
		fmt.Fprintf(out, "  %s  %s for %s (%s grant): %s\n", g.GrantID, g.Tool, where, g.Scope, why)
	}
}

// policySubs are the policy subcommands.
var policySubs = map[string]func(fs *flagSet, args []string, out io.Writer) error{
	"lint":   cmdPolicyLint,
	"test":   cmdPolicyTest,
	"apply":  cmdPolicyApply,
	"show":   cmdPolicyShow,
	"replay": cmdPolicyReplay,
}

func cmdPolicy(args []string, out io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(out, usageText("policy"))
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New("policy: want lint, test, apply, show or replay (see 'countersign policy --help')")
	}
	sub, args := args[0], args[1:]
	run, ok := policySubs[sub]
	if !ok {
		return fmt.Errorf("policy: unknown command %q (want lint, test, apply, show or replay)", sub)
	}
	return run(newFlagSet("policy "+sub, out), args, out)
}

func cmdPolicyLint(fs *flagSet, args []string, out io.Writer) error {
	strict := fs.Bool("strict", false, "fail on warnings too")
	dirFile := fs.String("directory", "", "approver directory file: groups it lists members of are not unknown (default: ask the server, when one is configured)")
	newClient := clientFlags(fs.FlagSet)
	if err := fs.Parse(reorderFlags(fs.FlagSet, args)); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("policy lint: want one or more policy files")
	}
	var groups func(string) bool
	if *dirFile != "" {
		d, err := directory.Load(*dirFile)
		if err != nil {
			fmt.Fprintln(out, err)
			return exitError(1)
		}
		groups = func(g string) bool { return len(d.Members(g)) > 0 }
	} else if serverConfigured(fs.FlagSet) {
		groups = serverGroups(out, newClient)
	}
	return policyLint(out, fs.Args(), *strict, groups)
}

func cmdPolicyTest(fs *flagSet, args []string, out io.Writer) error {
	verbose := fs.Bool("v", false, "explain every case, rule by rule")
	if err := fs.Parse(reorderFlags(fs.FlagSet, args)); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return errors.New("policy test: want a policy file and a cases file")
	}
	return policyTest(out, fs.Arg(0), fs.Arg(1), *verbose)
}

func cmdPolicyApply(fs *flagSet, args []string, out io.Writer) error {
	newClient := clientFlags(fs.FlagSet)
	dryRun := fs.Bool("dry-run", false, "validate on the server without applying")
	if err := fs.Parse(reorderFlags(fs.FlagSet, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("policy apply: want one policy file")
	}
	source, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	// Refuse locally what the server would refuse, with the file name.
	if errs := problemsOf(policy.Lint(source), "error"); len(errs) > 0 {
		printProblems(out, fs.Arg(0), errs)
		return exitError(1)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	path := "/v1/policy"
	if *dryRun {
		path += "?" + url.Values{"dry_run": {"1"}}.Encode()
	}
	var ans policyInfo
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.send(ctx, "POST", path, "application/yaml", source, &ans); err != nil {
		return err
	}
	printProblems(out, fs.Arg(0), ans.Warnings)
	printStoppedGrants(out, ans.StoppedGrants, *dryRun)
	switch {
	case *dryRun:
		fmt.Fprintf(out, "Policy version %s is valid; nothing was applied.\n", ans.Version)
	case ans.Changed != nil && !*ans.Changed:
		fmt.Fprintf(out, "Policy version %s is already live; nothing changed.\n", ans.Version)
	default:
		fmt.Fprintf(out, "Applied policy version %s (revision %d). Every orchestrator switches to it now; pending approvals keep their rules.\n",
			ans.Version, ans.Revision)
	}
	return nil
}

func cmdPolicyShow(fs *flagSet, args []string, out io.Writer) error {
	newClient := clientFlags(fs.FlagSet)
	source := fs.Bool("source", false, "print the policy's YAML source")
	jsonOut := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	path := "/v1/policy"
	if *source || *jsonOut {
		path += "?source=1"
	}
	var ans policyInfo
	if _, err := c.do(context.Background(), "GET", path, nil, &ans); err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, ans)
	}
	if *source {
		_, err := io.WriteString(out, ans.Source)
		return err
	}
	if !ans.Live {
		fmt.Fprintf(out, "Version:    %s (the policy the server started with; none applied yet)\n", ans.Version)
		return nil
	}
	fmt.Fprintf(out, "Version:    %s\nApplied:    %s by %s\nRevision:   %d\nSHA-256:    %s\n",
		ans.Version, ans.AppliedAt.Local().Format(time.RFC3339), ans.AppliedBy, ans.Revision, ans.SHA256)
	return nil
}

// serverConfigured reports whether the command is pointed at a server:
// --url or COUNTERSIGN_URL, or the serve.json of a local serve.
func serverConfigured(fs *flag.FlagSet) bool {
	if fs.Lookup("url").Value.String() != "" || os.Getenv("COUNTERSIGN_URL") != "" {
		return true
	}
	dir := firstNonEmpty(fs.Lookup("data").Value.String(), os.Getenv("COUNTERSIGN_DATA"), "./data")
	_, err := os.Stat(filepath.Join(dir, fileServe))
	return err == nil
}

// serverGroups asks the server which groups its approver directory gives
// members (GET /v1/policy). When it cannot, it says so and returns nil:
// then every group the policy does not define is reported.
func serverGroups(out io.Writer, newClient func() (*client, error)) func(string) bool {
	c, err := newClient()
	var ans policyInfo
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.do(ctx, "GET", "/v1/policy", nil, &ans)
	}
	if err != nil {
		fmt.Fprintf(out, "note: the server's approver directory could not be read (%v); groups only it defines are reported as unknown\n", err)
		return nil
	}
	if len(ans.DirectoryGroups) > 0 {
		fmt.Fprintf(out, "Groups from the approver directory of %s: %s\n", c.url, strings.Join(ans.DirectoryGroups, ", "))
	}
	return func(g string) bool { return slices.Contains(ans.DirectoryGroups, g) }
}

// policyLint lints each file. With groups (a directory's), the warnings
// about approver groups the policy does not define are dropped for the
// groups it reports: the orchestrator resolves those from the directory
// when it creates a request.
func policyLint(out io.Writer, files []string, strict bool, groups func(string) bool) error {
	failed := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		problems := policy.Lint(data)
		if groups != nil {
			problems = policy.WithoutGroupsOf(problems, groups)
			for i, p := range problems {
				if p.Group != "" {
					problems[i].Message = strings.Replace(p.Message, "(define it under groups:)", "(define it under groups: or give it members in the directory)", 1)
				}
			}
		}
		printProblems(out, f, problems)
		errs := problemsOf(problems, "error")
		if len(errs) > 0 || strict && len(problems) > 0 {
			failed = true
			continue
		}
		p, err := policy.Parse(data)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", f, err)
			failed = true
			continue
		}
		fmt.Fprintf(out, "%s: ok (version %s, %d warning(s))\n", f, p.Version(), len(problems))
		printShadowRules(out, f, p)
	}
	if failed {
		return exitError(1)
	}
	return nil
}

func policyTest(out io.Writer, policyFile, casesFile string, verbose bool) error {
	p, err := policy.Load(policyFile)
	if err != nil {
		var perrs *policy.Errors
		if errors.As(err, &perrs) {
			printProblems(out, policyFile, perrs.Problems)
			return exitError(1)
		}
		return err
	}
	data, err := os.ReadFile(casesFile)
	if err != nil {
		return err
	}
	cases, err := policy.ParseCases(data)
	if err != nil {
		return fmt.Errorf("%s: %w", casesFile, err)
	}
	passed := 0
	for _, r := range policy.RunCases(p, cases) {
		name := r.Case.Name
		if name == "" {
			name = fmt.Sprintf("%s:%d", casesFile, r.Case.Line)
		}
		if r.Pass {
			passed++
			fmt.Fprintf(out, "PASS  %s → %s (rule %s)\n", name, r.Got.Action, r.Got.Rule)
		} else {
			fmt.Fprintf(out, "FAIL  %s (%s:%d): %s\n", name, casesFile, r.Case.Line, r.Diff)
		}
		if r.Got.Error != "" {
			fmt.Fprintf(out, "      condition error (the call gates): %s\n", r.Got.Error)
		}
		printShadowVerdicts(out, r)
		if verbose || !r.Pass {
			for _, s := range r.Steps {
				mark := "  "
				if s.Matched {
					mark = "→ "
				}
				where := fmt.Sprintf(" (line %d)", s.Line)
				if s.Line == 0 { // the policy's default, which no line names
					where = ""
				}
				fmt.Fprintf(out, "      %s%s%s: %s\n", mark, s.Rule, where, s.Why)
			}
		}
	}
	fmt.Fprintf(out, "%d of %d case(s) passed against policy version %s\n", passed, len(cases), p.Version())
	printShadowRules(out, policyFile, p)
	if passed != len(cases) {
		return exitError(1)
	}
	return nil
}

// printShadowRules names the policy's shadow rules, which are evaluated
// and recorded but never enforced.
func printShadowRules(out io.Writer, file string, p *policy.Policy) {
	rules := p.ShadowRules()
	if len(rules) == 0 {
		return
	}
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = fmt.Sprintf("%s (line %d, %s)", r.Name, r.Line, r.Action)
	}
	fmt.Fprintf(out, "%s: %d shadow rule(s), evaluated and recorded, never enforced: %s\n", file, len(rules), strings.Join(names, ", "))
}

// printShadowVerdicts says what the shadow rules would have decided for a
// case, and whether that flips its verdict.
func printShadowVerdicts(out io.Writer, r policy.CaseResult) {
	for _, v := range r.Shadow {
		flip := "same verdict"
		if v.Flips(r.Got) {
			flip = "a flip from " + r.Got.Action
		}
		fmt.Fprintf(out, "      shadow rule %s would decide %s (%s)\n", v.Rule, v.Decision.Action, flip)
	}
}

func problemsOf(ps []policy.Problem, severity string) []policy.Problem {
	var out []policy.Problem
	for _, p := range ps {
		if p.Severity == severity {
			out = append(out, p)
		}
	}
	return out
}

func printProblems(out io.Writer, file string, ps []policy.Problem) {
	for _, p := range ps {
		sev := p.Severity
		if sev == "" {
			sev = "error"
		}
		loc := p.String()
		// Problem.String starts with "LINE:COL: " or "LINE: ".
		fmt.Fprintf(out, "%s:%s\n", file, strings.Replace(loc, ": ", ": "+sev+": ", 1))
	}
}

// reorderFlags moves flags before positional arguments, so
// "policy test a.yaml b.yaml -v" works as well as "-v a.yaml b.yaml". A flag
// of fs that takes a value keeps the argument after it.
func reorderFlags(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && i+1 < len(args) {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, pos...)
}

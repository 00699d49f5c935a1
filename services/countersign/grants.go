package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/contracts"
)

// grantFlags are approve's flags that ask for a standing grant.
type grantFlags struct {
	scope, ttl, when *string
}

func addGrantFlags(fs *flagSet) *grantFlags {
	return &grantFlags{
		scope: fs.String("grant", "", "also approve the same tool for the rest of this `run`, or for this `agent` (within what the rule permits)"),
		ttl:   fs.String("ttl", "", "how long the grant lives (at most the rule's max_ttl)"),
		when:  fs.String("when", "", "cover arguments this CEL condition admits (args.amount <= 100), not only these arguments"),
	}
}

// request is the vote's grant, or nil without --grant.
func (g *grantFlags) request() (*contracts.GrantRequest, error) {
	if *g.scope == "" || *g.scope == contracts.GrantScopeCall {
		if *g.ttl != "" || *g.when != "" {
			return nil, errors.New("--ttl and --when go with --grant run|agent")
		}
		return nil, nil
	}
	if *g.scope != contracts.GrantScopeRun && *g.scope != contracts.GrantScopeAgent {
		return nil, fmt.Errorf("--grant: want run or agent, not %q", *g.scope)
	}
	if *g.ttl == "" {
		return nil, errors.New("--grant needs --ttl (such as 2h)")
	}
	if d, err := time.ParseDuration(*g.ttl); err != nil || d <= 0 {
		return nil, fmt.Errorf("--ttl: want a positive duration such as 2h, not %q", *g.ttl)
	}
	r := &contracts.GrantRequest{Scope: *g.scope, TTL: *g.ttl, Arguments: contracts.GrantArgumentsSame}
	if *g.when != "" {
		r.Arguments, r.Condition = contracts.GrantArgumentsCondition, *g.when
	}
	return r, nil
}

// grantView is a grant as the API shows it.
type grantView struct {
	contracts.Grant
	Status string `json:"status"`
}

const grantsSubcommands = "ls, show or revoke"

func cmdGrants(args []string, out io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(out, usageText("grants"))
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New("grants: want " + grantsSubcommands + " (see 'countersign grants --help')")
	}
	sub, args := args[0], args[1:]
	g := &grantsCmd{fs: newFlagSet("grants "+sub, out), out: out, ctx: context.Background()}
	g.newClient = clientFlags(g.fs.FlagSet)
	g.jsonOut = g.fs.Bool("json", false, "print the API's JSON")
	switch sub {
	case "ls", "list":
		return g.list(args)
	case "show", "revoke":
		return g.showOrRevoke(sub, args)
	}
	return fmt.Errorf("grants: unknown subcommand %q (%s)", sub, grantsSubcommands)
}

// grantsCmd is one grants subcommand: its flags, the API client they make,
// and where it prints.
type grantsCmd struct {
	fs        *flagSet
	newClient func() (*client, error)
	jsonOut   *bool
	out       io.Writer
	ctx       context.Context
}

func (g *grantsCmd) list(args []string) error {
	status := g.fs.String("status", "active", "active, expired, revoked or all")
	agent := g.fs.String("agent", "", "only this agent's")
	tool := g.fs.String("tool", "", "only this tool's")
	if err := g.fs.Parse(reorder(args)); err != nil {
		return err
	}
	c, err := g.newClient()
	if err != nil {
		return err
	}
	q := url.Values{"status": {*status}}
	if *agent != "" {
		q.Set("agent", *agent)
	}
	if *tool != "" {
		q.Set("tool", *tool)
	}
	var ans struct {
		Grants []grantView `json:"grants"`
	}
	if _, err := c.do(g.ctx, "GET", "/v1/grants?"+q.Encode(), nil, &ans); err != nil {
		return err
	}
	if *g.jsonOut {
		return printJSON(g.out, ans)
	}
	if len(ans.Grants) == 0 {
		fmt.Fprintln(g.out, "No grants.")
		return nil
	}
	tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tAGENT\tTOOL\tSCOPE\tARGUMENTS\tGRANTED BY\tEXPIRES")
	for _, gr := range ans.Grants {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", gr.GrantID, gr.Status, gr.Agent, gr.Tool, scopeText(gr.Grant),
			argsText(gr.Grant), strings.Join(gr.GrantedBy, ","), gr.ExpiresAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// grantEvents is a grant's timeline as GET /v1/grants/{id}/events answers.
type grantEvents struct {
	Events []struct {
		Kind string               `json:"kind"`
		Data contracts.GrantEvent `json:"data"`
	} `json:"events"`
}

func (g *grantsCmd) showOrRevoke(sub string, args []string) error {
	if err := g.fs.Parse(reorder(args)); err != nil {
		return err
	}
	if g.fs.NArg() != 1 {
		return errors.New("want exactly one grant id")
	}
	c, err := g.newClient()
	if err != nil {
		return err
	}
	id, err := resolveID(g.ctx, c, g.fs.Arg(0))
	if err != nil {
		return err
	}
	var gv grantView
	if sub == "revoke" {
		status, err := c.do(g.ctx, "POST", "/v1/grants/"+url.PathEscape(id)+"/revoke", nil, &gv)
		if err != nil {
			return err
		}
		if status == 202 {
			fmt.Fprintf(g.out, "Revocation sent; the arbiter has not stored it yet. Check with: countersign grants show %s\n", id)
			return nil
		}
	} else if _, err := c.do(g.ctx, "GET", "/v1/grants/"+url.PathEscape(id), nil, &gv); err != nil {
		return err
	}
	var tl grantEvents
	if _, err := c.do(g.ctx, "GET", "/v1/grants/"+url.PathEscape(id)+"/events", nil, &tl); err != nil {
		return err
	}
	if *g.jsonOut {
		return printJSON(g.out, map[string]any{"grant": gv, "events": tl.Events})
	}
	printGrant(g.out, gv, tl)
	return nil
}

// printGrant prints a grant and its timeline for people.
func printGrant(out io.Writer, g grantView, tl grantEvents) {
	fmt.Fprintf(out, "Grant %s: %s\n  %s may call %s %s, %s\n  granted by %s at %s (rule %s, version %s); expires %s\n",
		g.GrantID, g.Status, g.Agent, g.Tool, scopeText(g.Grant), argsText(g.Grant), strings.Join(g.GrantedBy, ", "),
		g.GrantedAt.Local().Format(time.DateTime), g.Policy.Rule, g.Policy.Version, g.ExpiresAt.Local().Format(time.DateTime))
	if g.Revoked != nil {
		fmt.Fprintf(out, "  revoked by %s at %s\n", g.Revoked.By, g.Revoked.At.Local().Format(time.DateTime))
	}
	for _, ev := range tl.Events {
		d := ev.Data
		switch ev.Kind {
		case "grant_used":
			fmt.Fprintf(out, "  %s  used by %s: run %s, call %s\n", d.At.Local().Format(time.DateTime), strings.Join(d.By, ","), d.RunID, d.ToolCallID)
		case "grant_issued":
			fmt.Fprintf(out, "  %s  issued by %s (approval of call %s)\n", d.At.Local().Format(time.DateTime), strings.Join(d.By, ","), d.ToolCallID)
		case "grant_revoked":
			fmt.Fprintf(out, "  %s  revoked by %s\n", d.At.Local().Format(time.DateTime), strings.Join(d.By, ","))
		}
	}
}

func scopeText(g contracts.Grant) string {
	if g.Scope == contracts.GrantScopeRun {
		return "in run " + g.RunID
	}
	if g.Tenant != "" {
		return "in any run (tenant " + g.Tenant + ")"
	}
	return "in any run"
}

func argsText(g contracts.Grant) string {
	if g.Arguments == contracts.GrantArgumentsCondition {
		return "when " + g.Condition
	}
	return "with the same arguments"
}

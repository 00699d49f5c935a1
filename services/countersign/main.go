// Command countersign runs and operates Countersign: durable human approval
// for AI agent tool calls. It holds wiring only; the logic lives in the
// contracts, events, orchestrator and services/api packages.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

var version = "dev"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		var ee exitError
		if errors.As(err, &ee) {
			// The command already said what went wrong.
			os.Exit(int(ee))
		}
		fmt.Fprintln(os.Stderr, "countersign:", err)
		os.Exit(1)
	}
}

// exitError carries a specific exit status.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText(""))
		return exitError(2)
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout)
	case "approvals":
		return cmdApprovals(args[1:], stdout)
	case "policy":
		return cmdPolicy(args[1:], stdout)
	case "grants":
		return cmdGrants(args[1:], stdout)
	case "audit":
		return cmdAudit(args[1:], stdout)
	case "oversight":
		return cmdOversight(args[1:], stdout)
	case "provision":
		return cmdProvision(args[1:], stdout)
	case "demo":
		return cmdDemo(args[1:], stdout)
	case "stop":
		return cmdStop(args[1:], stdout)
	case "bench":
		return cmdBench(args[1:], stdout)
	case "token":
		return cmdToken(args[1:], stdout)
	case "login":
		return cmdLogin(args[1:], stdout)
	case "logout":
		return cmdLogout(args[1:], stdout)
	case "receipts":
		return cmdReceipts(args[1:], stdout)
	case "mcp":
		return cmdMCP(args[1:], stdout, stderr)
	case "hook":
		return cmdHook(args[1:], os.Stdin, stdout, stderr)
	case "version":
		if err := newFlagSet("version", stdout).Parse(args[1:]); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "countersign", version)
		return nil
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[1] != "-h" && args[1] != "--help" {
			// "countersign help approvals show" is "countersign approvals show --help".
			return run(append(slices.Clone(args[1:]), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usageText(""))
		return nil
	}
	fmt.Fprint(stderr, usageText(""))
	return fmt.Errorf("unknown command %q", args[0])
}

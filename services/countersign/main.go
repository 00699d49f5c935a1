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
)

const usage = `countersign — durable human approval for AI agent tool calls

Usage:
  countersign serve [flags]                 run every role with an embedded NATS server
  countersign approvals ls [--status S] [--agent A] [--run R] [--limit N]
  countersign approvals show ID [--wait 30s]
  countersign approvals approve ID [--comment TEXT]
  countersign approvals reject ID --reason TEXT  the reason goes back to the agent
  countersign approvals edit ID --args FILE | --json '{...}'  approve with new arguments (shows the diff)
  countersign approvals respond ID "TEXT"    no execution; TEXT is the agent's tool result
  countersign approvals answer ID --json '{...}' | --text TEXT | --decline | --cancel
  countersign approvals extend ID 2h         move the deadline (or give an RFC 3339 time)
  countersign approvals cancel ID [--reason TEXT]
  countersign provision --nats-url URLS    create the streams and buckets on an external NATS (as admin)
  countersign audit ID [--json]             the full timeline: request, policy, notifications, votes, outcome
  countersign policy lint [--directory F] FILE...  check syntax, CEL types, unreachable rules, unknown groups
  countersign policy test FILE CASES [-v]   run a table of tool calls against a policy
  countersign policy apply FILE [--dry-run] validate and make it the fleet's live policy
  countersign policy show [--source]        the live policy
  countersign demo [--count N] [--no-wait]  a simulated agent proposing tool calls
  countersign bench [flags]                 measure cycles/s, latency and pending capacity
  countersign token new [--subject ID] [--roles agent,approver]
  countersign version

The CLI finds the API through COUNTERSIGN_URL and COUNTERSIGN_TOKEN, or, on the
machine that runs 'countersign serve', through ./data (override with --data or
COUNTERSIGN_DATA).
`

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
		fmt.Fprint(stderr, usage)
		return exitError(2)
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:])
	case "approvals":
		return cmdApprovals(args[1:], stdout)
	case "policy":
		return cmdPolicy(args[1:], stdout)
	case "audit":
		return cmdAudit(args[1:], stdout)
	case "provision":
		return cmdProvision(args[1:], stdout)
	case "demo":
		return cmdDemo(args[1:], stdout)
	case "bench":
		return cmdBench(args[1:], stdout)
	case "token":
		return cmdToken(args[1:], stdout)
	case "version":
		fmt.Fprintln(stdout, "countersign", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

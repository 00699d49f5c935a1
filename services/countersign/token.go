package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/countersign/countersign/services/api"
)

func cmdToken(args []string, out io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(out, usageText("token"))
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "new" {
		return errors.New("token: want 'token new'")
	}
	fs := newFlagSet("token new", out)
	subject := fs.String("subject", "", "identity the token authenticates (approver or agent id)")
	name := fs.String("name", "", "a label for the token")
	roles := fs.String("roles", "approver", "comma-separated roles: agent, approver, admin, viewer, auditor")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *subject == "" {
		return errors.New("token new: --subject is required")
	}
	token, hash, err := api.NewToken()
	if err != nil {
		return err
	}
	if *name == "" {
		*name = *subject
	}
	fmt.Fprintf(out, "Token (shown once; give it to %s):\n  %s\n\n", *subject, token)
	roleList := strings.Join(strings.Split(*roles, ","), ", ")
	fmt.Fprintf(out, "Add to the tokens of countersign.yaml (only the hash is stored):\n")
	fmt.Fprintf(out, "  - name: %s\n    subject: %s\n    sha256: %s\n    roles: [%s]\n\n", *name, *subject, hash, roleList)
	fmt.Fprintf(out, "or, for an MCP client of countersign mcp --listen, to its callers file (--callers FILE):\n")
	fmt.Fprintf(out, "  - id: %s\n    sha256: %s\n\n", *subject, hash)
	// The directory entry comes last: scripts take it with tail -3.
	fmt.Fprintf(out, "or to the tokens of user %s in the approver directory (serve --directory FILE):\n", *subject)
	fmt.Fprintf(out, "      - name: %s\n        sha256: %s\n        roles: [%s]\n", *name, hash, roleList)
	return nil
}

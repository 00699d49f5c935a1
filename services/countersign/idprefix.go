package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
)

// minIDPrefix is the shortest approval id prefix the CLI resolves.
const minIDPrefix = 4

// maxCandidates bounds the approvals an ambiguous prefix lists.
const maxCandidates = 10

// ErrAmbiguousID is matched (errors.Is) by the error of an id prefix that
// more than one approval starts with.
var ErrAmbiguousID = errors.New("ambiguous approval id")

// resolveID turns what the person typed into an approval id: a whole id as
// is, or a unique prefix of at least minIDPrefix characters, as git takes
// commit ids. The API's listing (?id_prefix=) finds the approvals a prefix
// matches.
func resolveID(ctx context.Context, c *client, arg string) (string, error) {
	if _, err := uuid.Parse(arg); err == nil && len(arg) == 36 {
		return arg, nil // a whole id
	}
	if !contracts.ValidEventID(arg) {
		return "", fmt.Errorf("%q is not an approval id (ids are letters, digits, '-' and '_')", arg)
	}
	if len(arg) < minIDPrefix {
		return "", fmt.Errorf("approval id %q is too short: give at least %d characters of it", arg, minIDPrefix)
	}
	// Every page up to the end or the candidates' bound: a page of older
	// history can come back short, and a prefix is unique only if no later
	// page holds another.
	ans, err := listUpTo(ctx, c, url.Values{"id_prefix": {arg}}, maxCandidates+1)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, it := range ans.Items {
		id := it.Record.Request.EventID
		if id == arg {
			return id, nil // an id that is also the start of longer ones
		}
		ids = append(ids, id)
	}
	switch {
	case len(ids) == 1:
		return ids[0], nil
	case len(ids) == 0:
		return "", fmt.Errorf("no approval id starts with %q", arg)
	}
	var b strings.Builder
	for i, it := range ans.Items {
		if i == maxCandidates {
			b.WriteString("\n  …")
			break
		}
		r := it.Record.Request
		tool := ""
		if r.ToolCall != nil {
			tool = r.ToolCall.Name
		}
		fmt.Fprintf(&b, "\n  %s  %s  %s %s", r.EventID, it.Record.Status, r.Run.Agent, tool)
	}
	return "", fmt.Errorf("%w: %q starts more than one approval id; give more of it:%s", ErrAmbiguousID, arg, b.String())
}

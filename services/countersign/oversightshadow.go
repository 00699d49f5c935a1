package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/countersign/countersign/services/api/oversight"
)

// printOversightShadow prints the shadow rules' rows of an oversight
// report: the requests each would have matched and, by direction, those it
// would have decided otherwise. Nothing is printed without shadow rules.
func printOversightShadow(out io.Writer, rows []oversight.ShadowStats) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "\nShadow rules (never enforced), over these gated requests:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHADOW RULE\tREQUESTS\tWOULD FLIP\tBY DIRECTION")
	for _, r := range rows {
		var dirs []string
		for _, f := range r.Flips {
			dirs = append(dirs, fmt.Sprintf("%s → %s: %d", f.From, f.To, f.Count))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Rule, r.Requests, r.Flipped, strings.Join(dirs, ", "))
	}
	_ = tw.Flush()
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/countersign/countersign/services/api/oversight"
)

// cmdOversight prints how approvals are being decided, per approver and
// per rule (GET /v1/oversight), for admins, viewers and auditors.
func cmdOversight(args []string, out io.Writer) error {
	fs := newFlagSet("oversight", out)
	newClient := clientFlags(fs.FlagSet)
	since := fs.String("since", "", "window start: an age (30d, 12h) or an RFC 3339 time (default 30d)")
	fast := fs.String("fast", "", "a decision on high or critical risk is fast under this (default 10s)")
	jsonOut := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("oversight: unexpected argument %q (see 'countersign oversight --help')", fs.Arg(0))
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *since != "" {
		q.Set("since", *since)
	}
	if *fast != "" {
		q.Set("fast", *fast)
	}
	path := "/v1/oversight"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var rep oversight.Report
	if _, err := c.do(context.Background(), "GET", path, nil, &rep); err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, rep)
	}
	printOversight(out, &rep)
	return nil
}

// printOversight writes the report as a summary line and two tables; a "!"
// marks fast decisions on high risk (half or more of at least two) and
// requests that expired undecided.
func printOversight(out io.Writer, rep *oversight.Report) {
	fast := oversight.Human(rep.FastThresholdSeconds)
	fmt.Fprintf(out, "Requests made from %s to %s that you may read. Fast: under %s.\n\n",
		rep.Since.Format("2006-01-02 15:04 MST"), rep.Until.Format("2006-01-02 15:04 MST"), fast)
	if rep.Partial {
		fmt.Fprint(out, "Partial: older decided requests of this window are not counted (the server keeps the newest\n"+
			"decided requests in memory, index_recent); choose a shorter window or raise index_recent.\n\n")
	}
	t := &rep.Total
	fmt.Fprintf(out, "%d requests, %d decisions, approval rate %s, time to decide median %s and p90 %s,\n",
		t.Requests, t.Decisions, rateText(t), spreadText(t, func(p *oversight.Spread) float64 { return p.Median }),
		spreadText(t, func(p *oversight.Spread) float64 { return p.P90 }))
	fmt.Fprintf(out, "%s fast on high and critical risk, %d expired undecided, %d grants issued (%d calls they allowed).\n",
		fastText(t), t.ExpiredUndecided, t.GrantsIssued, t.GrantUses)
	table := func(head string, names []string, rows []*oversight.Stats) {
		fmt.Fprintln(out)
		if len(rows) == 0 {
			fmt.Fprintf(out, "No %s rows in this window.\n", head)
			return
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tREQUESTS\tDECISIONS\tAPPROVED\tMEDIAN\tP90\tFAST (HIGH RISK)\tEXPIRED UNDECIDED\tGRANTS (USES)\n", head)
		for i, s := range rows {
			expired := fmt.Sprint(s.ExpiredUndecided)
			if s.ExpiredUndecided > 0 {
				expired += " !"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d (%d)\n", names[i], s.Requests, s.Decisions, rateText(s),
				spreadText(s, func(p *oversight.Spread) float64 { return p.Median }),
				spreadText(s, func(p *oversight.Spread) float64 { return p.P90 }), fastText(s), expired, s.GrantsIssued, s.GrantUses)
		}
		_ = tw.Flush()
	}
	var names []string
	var rows []*oversight.Stats
	for i := range rep.Approvers {
		names, rows = append(names, rep.Approvers[i].Approver), append(rows, &rep.Approvers[i].Stats)
	}
	table("APPROVER", names, rows)
	names, rows = nil, nil
	for i := range rep.Rules {
		names, rows = append(names, rep.Rules[i].Rule), append(rows, &rep.Rules[i].Stats)
	}
	table("RULE", names, rows)
	printOversightChannels(out, rep.Channels)
	printOversightExecution(out, &rep.Execution)
	printOversightShadow(out, rep.Shadow)
}

// printOversightChannels writes the time from request to outcome per
// channel that decided (the deciding vote's via, timeout, cancelled).
func printOversightChannels(out io.Writer, rows []oversight.ChannelStats) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "\nTime to decision by channel (from the request to its outcome, by the deciding vote's channel):")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANNEL\tDECIDED\tMIN\tMEDIAN\tP90\tMAX")
	for _, r := range rows {
		p := r.TimeToDecision
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Channel, r.Decided,
			oversight.Human(p.Min), oversight.Human(p.Median), oversight.Human(p.P90), oversight.Human(p.Max))
	}
	_ = tw.Flush()
}

// printOversightExecution writes what became of the approved calls; a "!"
// marks calls claimed and never reported.
func printOversightExecution(out io.Writer, x *oversight.ExecutionStats) {
	if x.Approved == 0 {
		return
	}
	fmt.Fprintf(out, "\n%d approved, %d claimed: %d succeeded, %d failed, %s never reported.\n",
		x.Approved, x.Claimed, x.Succeeded, x.Failed, notReportedText(x.NotReported))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tAPPROVED\tCLAIMED\tSUCCEEDED\tFAILED\tNOT REPORTED")
	for _, r := range x.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", r.Rule, r.Approved, r.Claimed, r.Succeeded, r.Failed, notReportedText(r.NotReported))
	}
	_ = tw.Flush()
}

func notReportedText(n int) string {
	if n > 0 {
		return fmt.Sprint(n, " !")
	}
	return "0"
}

func rateText(s *oversight.Stats) string {
	if s.ApprovalRate == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *s.ApprovalRate*100)
}

func spreadText(s *oversight.Stats, pick func(*oversight.Spread) float64) string {
	if s.TimeToDecide == nil {
		return "-"
	}
	return oversight.Human(pick(s.TimeToDecide))
}

func fastText(s *oversight.Stats) string {
	if s.HighRiskDecisions == 0 {
		return "-"
	}
	text := fmt.Sprintf("%d of %d", s.FastHighRisk, s.HighRiskDecisions)
	if s.ManyFast() {
		text += " !"
	}
	return text
}

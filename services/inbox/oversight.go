package inbox

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/api/oversight"
)

// The oversight page (GET /oversight) shows the API's oversight figures
// (api.Server.Oversight: the requests the signed-in person may read) as
// charts drawn on the server as inline SVG, and as tables with the exact
// figures. The charts need no script and no inline style: their colours
// come from classes in /assets/oversight.css.

var oversightTemplate = template.Must(template.New("oversight").Funcs(template.FuncMap{"tableOf": tableOf, "count": count, "moment": momentOf}).
	ParseFS(webFS, "web/layout.html", "web/oversight.html"))

// figuresTable is a table of rows, by approver or by rule.
type figuresTable struct {
	ID, Head string
	Rows     []figures
}

func tableOf(id, head string, rows []figures) figuresTable {
	return figuresTable{ID: id, Head: head, Rows: rows}
}

// oversightWindows are the windows the page offers.
var oversightWindows = []struct{ Value, Label string }{
	{"1d", "Last 24 hours"}, {"7d", "Last 7 days"}, {"30d", "Last 30 days"}, {"90d", "Last 90 days"},
}

type oversightPage struct {
	Page
	Since, Fast string
	Windows     []struct{ Value, Label string }
	Report      *oversight.Report
	Total       figures
	Approvers   []figures
	Rules       []figures
	// Charts by approver and by rule.
	ApproverCharts, RuleCharts charts
	// Channels are the time to decision by the deciding vote's channel,
	// ExecutionRules what became of approved calls per rule, Shadow the
	// shadow rules' verdicts.
	Channels       []channelRow
	ExecutionRules []executionRow
	Shadow         []shadowRow
}

// channelRow is one channel's requests decided and spread of times to
// decision, as shown, with the exact seconds for machines.
type channelRow struct {
	Name                      string
	Decided                   int
	Min, Median, P90, Max     string
	MinV, MedianV, P90V, MaxV string
}

// executionRow is one row of what became of approved calls.
type executionRow struct {
	Name string
	oversight.ExecutionCounts
}

// shadowRow is one shadow rule's verdicts, its flips said in words.
type shadowRow struct {
	Rule              string
	Requests, Flipped int
	Directions        string
}

// addSections fills the rows of the sections below the tables.
func (pg *oversightPage) addSections(rep *oversight.Report) {
	exact := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	for _, c := range rep.Channels {
		p := c.TimeToDecision
		pg.Channels = append(pg.Channels, channelRow{Name: c.Channel, Decided: c.Decided,
			Min: seconds(p.Min), Median: seconds(p.Median), P90: seconds(p.P90), Max: seconds(p.Max),
			MinV: exact(p.Min), MedianV: exact(p.Median), P90V: exact(p.P90), MaxV: exact(p.Max)})
	}
	for _, r := range rep.Execution.Rules {
		pg.ExecutionRules = append(pg.ExecutionRules, executionRow{Name: r.Rule, ExecutionCounts: r.ExecutionCounts})
	}
	for _, sh := range rep.Shadow {
		var dirs []string
		for _, f := range sh.Flips {
			dirs = append(dirs, fmt.Sprintf("%s → %s: %d", f.From, f.To, f.Count))
		}
		directions := strings.Join(dirs, ", ")
		if directions == "" {
			directions = "–"
		}
		pg.Shadow = append(pg.Shadow, shadowRow{Rule: sh.Rule, Requests: sh.Requests, Flipped: sh.Flipped, Directions: directions})
	}
}

// figures are one row's numbers as shown, with their exact values for
// machines (data attributes).
type figures struct {
	Name                       string
	Requests, Decisions        int
	Approved, Rejected, Other  int
	Rate                       string // "83%" or "–"
	RateValue                  string // exact, or "" without a rate
	Median, P90                string // "4s", "2m05s" or "–"
	MedianValue, P90Value      string // seconds, exact, or ""
	HighRisk, Fast, Expired    int
	FastShare                  string
	FastFlag, ExpiredFlag      bool
	FastThreshold              string
	Stats                      oversight.Stats
	TimeToDecide               *oversight.Spread
	HasDecisions, HasHighRisks bool
}

func figuresOf(name string, s oversight.Stats) figures {
	f := figures{
		Name: name, Requests: s.Requests, Decisions: s.Decisions, Approved: s.Approved, Rejected: s.Rejected,
		Other: s.Responded + s.Answered, HighRisk: s.HighRiskDecisions, Fast: s.FastHighRisk, Expired: s.ExpiredUndecided,
		Rate: "–", Median: "–", P90: "–", FastShare: "–", Stats: s, TimeToDecide: s.TimeToDecide,
		HasDecisions: s.Decisions > 0, HasHighRisks: s.HighRiskDecisions > 0, ExpiredFlag: s.ExpiredUndecided > 0,
	}
	if s.ApprovalRate != nil {
		f.Rate = fmt.Sprintf("%.0f%%", *s.ApprovalRate*100)
		f.RateValue = strconv.FormatFloat(*s.ApprovalRate, 'g', -1, 64)
	}
	if p := s.TimeToDecide; p != nil {
		f.Median, f.P90 = seconds(p.Median), seconds(p.P90)
		f.MedianValue, f.P90Value = strconv.FormatFloat(p.Median, 'g', -1, 64), strconv.FormatFloat(p.P90, 'g', -1, 64)
	}
	if s.HighRiskDecisions > 0 {
		share := float64(s.FastHighRisk) / float64(s.HighRiskDecisions)
		f.FastShare = fmt.Sprintf("%.0f%%", share*100)
		f.FastFlag = s.ManyFast()
	}
	return f
}

// seconds says a time to decide for people.
func seconds(s float64) string { return oversight.Human(s) }

// getOversight serves GET /oversight?since=&fast=.
func (in *Inbox) getOversight(w http.ResponseWriter, r *http.Request, sess *session) {
	pg := oversightPage{Page: in.pageFor(sess, "Oversight", "oversight"), Windows: oversightWindows,
		Since: r.URL.Query().Get("since"), Fast: r.URL.Query().Get("fast")}
	if pg.Since == "" {
		pg.Since = "30d"
	}
	if pg.Fast == "" {
		pg.Fast = oversight.DefaultFast.String()
	}
	q, aerr := api.ParseOversightQuery(pg.Since, pg.Fast, in.now())
	if aerr == nil {
		pg.Report, aerr = in.api.Oversight(r.Context(), sess.p, q)
	}
	if aerr != nil {
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	rep := pg.Report
	pg.Total = figuresOf("All", rep.Total)
	for _, a := range rep.Approvers {
		pg.Approvers = append(pg.Approvers, figuresOf(a.Approver, a.Stats))
	}
	for _, ru := range rep.Rules {
		pg.Rules = append(pg.Rules, figuresOf(ru.Rule, ru.Stats))
	}
	pg.ApproverCharts = chartsOf("approvers", pg.Approvers, rep.FastThresholdSeconds)
	pg.RuleCharts = chartsOf("rules", pg.Rules, rep.FastThresholdSeconds)
	pg.addSections(rep)
	var b bytes.Buffer
	if err := oversightTemplate.ExecuteTemplate(&b, "layout", pg); err != nil {
		in.log.Error("inbox template", "page", "oversight", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

package inbox_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api/oversight"
)

const oversightInboxPolicy = `version: "oversight-inbox-1"
default: require_approval
rules:
  - name: deny-large-refunds
    mode: shadow
    tools: ["billing.refund"]
    when: 'args.amount >= 500'
    action: deny
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    risk: high
    approvers: [alice]
`

var (
	tableRow  = regexp.MustCompile(`(?s)<tr data-name="([^"]*)">(.*?)</tr>`)
	tableCell = regexp.MustCompile(`data-k="([a-z0-9_]+)"(?: data-v="([^"]*)")?[^>]*>([^<]*)<`)
)

// shownTable reads a table of the oversight page: per row name, each
// cell's exact value (data-v), or its text where it has none.
func shownTable(t *testing.T, page []byte, id string) map[string]map[string]string {
	t.Helper()
	start := regexp.MustCompile(`(?s)<table class="figures" id="` + id + `">(.*?)</table>`).FindSubmatch(page)
	if start == nil {
		t.Fatalf("the page has no table %s:\n%s", id, page)
	}
	rows := map[string]map[string]string{}
	for _, r := range tableRow.FindAllSubmatch(start[1], -1) {
		cells := map[string]string{}
		for _, c := range tableCell.FindAllSubmatch(r[2], -1) {
			v := string(c[2])
			if len(c[2]) == 0 {
				v = string(c[3])
			}
			cells[string(c[1])] = v
		}
		rows[string(r[1])] = cells
	}
	return rows
}

// TestOversightPageShowsChannelsExecutionAndShadow: the oversight page
// shows the report's time to decision by channel, what became of the
// approved calls (claimed and never reported flagged), and the shadow
// rules' verdicts, with the figures of GET /v1/oversight.
func TestOversightPageShowsChannelsExecutionAndShadow(t *testing.T) {
	e := setup(t)
	if r := e.call(t, "POST", "/v1/policy", "admin", oversightInboxPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	small := e.refund(t, "run-1", "Initech", "", 100)
	large := e.refund(t, "run-2", "Globex", "", 600)
	larger := e.refund(t, "run-3", "Umbrella", "", 700)
	for _, id := range []string{small, large} {
		if r := e.call(t, "POST", "/v1/approvals/"+id+"/votes", "alice", `{"decision":"approve","via":"cli"}`); r.status != http.StatusOK {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		if r := e.call(t, "POST", "/v1/approvals/"+id+"/claim", "agent", map[string]any{"claim_id": "claim-" + id}); r.status != http.StatusOK {
			t.Fatalf("claim: %d %s", r.status, r.body)
		}
	}
	report := map[string]any{"command_id": "report-1", "status": contracts.ExecutionSucceeded}
	if r := e.call(t, "POST", "/v1/approvals/"+small+"/outcome", "agent", report); r.status != http.StatusOK {
		t.Fatalf("outcome: %d %s", r.status, r.body)
	}
	if r := e.call(t, "POST", "/v1/approvals/"+larger+"/votes", "alice", `{"decision":"reject","comment":"too much"}`); r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	var rep oversight.Report
	e.call(t, "GET", "/v1/oversight", "bob", nil).decode(t, &rep)
	if rep.Execution.Approved != 2 || rep.Execution.NotReported != 1 || len(rep.Shadow) != 1 || len(rep.Channels) != 2 {
		t.Fatalf("the history has %+v %+v %+v", rep.Execution, rep.Shadow, rep.Channels)
	}

	page := e.signIn(t, "bob").get("/oversight")
	if page.status != http.StatusOK {
		t.Fatalf("/oversight: %d %s", page.status, page.body)
	}
	channels := shownTable(t, page.body, "oversight-channels")
	for _, c := range rep.Channels {
		row := channels[c.Channel]
		p := c.TimeToDecision
		want := map[string]string{"decided": strconv.Itoa(c.Decided), "min": num(p.Min), "median": num(p.Median), "p90": num(p.P90), "max": num(p.Max)}
		if fmt.Sprint(row) != fmt.Sprint(want) {
			t.Errorf("channel %s shown %v, want %v", c.Channel, row, want)
		}
	}
	if len(channels) != len(rep.Channels) {
		t.Errorf("channels shown %v, JSON %+v", channels, rep.Channels)
	}
	exec := shownTable(t, page.body, "oversight-execution-rules")
	want := map[string]string{"approved": "2", "claimed": "2", "succeeded": "1", "failed": "0", "not_reported": "1"}
	if fmt.Sprint(exec["refunds"]) != fmt.Sprint(want) || len(exec) != 1 {
		t.Errorf("execution rows shown %v, want refunds %v", exec, want)
	}
	if !regexp.MustCompile(`<div class="flag"><dt>Claimed, never reported</dt><dd data-k="not_reported" data-v="1">`).Match(page.body) {
		t.Errorf("the claimed, never reported tile is not flagged:\n%s", page.body)
	}
	shadow := shownTable(t, page.body, "oversight-shadow")
	want = map[string]string{"requests": "2", "flipped": "2", "flips": "require_approval → deny: 2"}
	if fmt.Sprint(shadow["deny-large-refunds"]) != fmt.Sprint(want) || len(shadow) != 1 {
		t.Errorf("shadow rows shown %v, want deny-large-refunds %v", shadow, want)
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

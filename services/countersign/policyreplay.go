package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/orchestrator/policy"
)

// replayReport is the report line of POST /v1/policy/replay.
type replayReport struct {
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Scanned uint64    `json:"scanned"`
	policy.ReplayReport
	Sees string `json:"sees"`
}

// replayLine is one line of the replay's answer.
type replayLine struct {
	Progress *struct {
		Scanned  uint64 `json:"scanned"`
		Total    uint64 `json:"total"`
		Replayed int    `json:"replayed"`
	} `json:"progress"`
	Report *replayReport `json:"report"`
	Error  *apiError     `json:"error"`
}

// cmdPolicyReplay replays the recorded requests of a window against a
// candidate policy file (POST /v1/policy/replay) and prints what would
// change, per rule of the candidate. Progress goes to standard error.
func cmdPolicyReplay(fs *flagSet, args []string, out io.Writer) error {
	newClient := clientFlags(fs.FlagSet)
	since := fs.String("since", "30d", "replay requests created since then: an age (30d, 12h) or an RFC 3339 time")
	until := fs.String("until", "", "and before then (default: now)")
	jsonOut := fs.Bool("json", false, "print the report's JSON")
	quiet := fs.Bool("quiet", false, "print no progress")
	if err := fs.Parse(reorderFlags(fs.FlagSet, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("policy replay: want one candidate policy file")
	}
	source, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	if errs := problemsOf(policy.Lint(source), "error"); len(errs) > 0 {
		printProblems(out, fs.Arg(0), errs)
		return exitError(1)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	q := url.Values{"since": {*since}}
	if *until != "" {
		q.Set("until", *until)
	}
	var progress io.Writer = os.Stderr
	if *quiet || *jsonOut {
		progress = io.Discard
	}
	rep, err := c.replay(context.Background(), "/v1/policy/replay?"+q.Encode(), source, progress)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(out, rep)
	}
	printReplay(out, rep)
	return nil
}

// replay posts a candidate and follows the NDJSON answer, writing progress
// to progress, until its report.
func (c *client) replay(ctx context.Context, path string, source []byte, progress io.Writer) (*replayReport, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, bytes.NewReader(source))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "countersign-cli/1")
	req.Header.Set("Content-Type", "application/yaml")
	hc := *c.http
	hc.Timeout = 0 // a long history streams for as long as it takes; each line shows it moves
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Countersign API at %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return nil, &httpStatusError{Status: resp.StatusCode, Body: strings.TrimSpace(string(data))}
		}
		e.Error.Status = resp.StatusCode
		return nil, &e.Error
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var l replayLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("unexpected answer from the API: %w", err)
		}
		switch {
		case l.Progress != nil:
			fmt.Fprintf(progress, "\rread %d of %d records, %d requests replayed", l.Progress.Scanned, l.Progress.Total, l.Progress.Replayed)
		case l.Error != nil:
			fmt.Fprintln(progress)
			return nil, l.Error
		case l.Report != nil:
			fmt.Fprintln(progress)
			return l.Report, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the API's answer ended before its report")
}

// printReplay prints a replay's report: a line per rule of the candidate,
// then its changes with examples.
func printReplay(out io.Writer, r *replayReport) {
	fmt.Fprintf(out, "Replayed %d requests created from %s to %s against candidate %s: %d would change.\n",
		r.Requests, r.Since.Local().Format("2006-01-02 15:04 MST"), r.Until.Local().Format("2006-01-02 15:04 MST"), r.Candidate, r.Changed)
	if r.Questions > 0 {
		fmt.Fprintf(out, "%d questions (human_input) were not replayed.\n", r.Questions)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tREQUESTS\tCHANGED\tCHANGE\tCOUNT\tEXAMPLES")
	for _, rule := range r.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\t\t\n", rule.Rule, rule.Requests, rule.Changed)
		for _, c := range rule.Changes {
			var ex []string
			for _, e := range c.Examples {
				ex = append(ex, fmt.Sprintf("%s (%s, %s)", e.EventID, e.Tool, e.Agent))
			}
			if c.Hidden > 0 {
				ex = append(ex, fmt.Sprintf("%d you may not read", c.Hidden))
			}
			fmt.Fprintf(tw, "\t\t\t%s %s → %s\t%d\t%s\n", c.Field, c.From, c.To, c.Count, strings.Join(ex, ", "))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "\n%s\n", r.Sees)
}

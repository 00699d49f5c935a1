package policy

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Severities of a Problem.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Problem is one finding about a policy or cases file, positioned in the
// file: Line and Column count from 1; 0 means unknown.
type Problem struct {
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	// Group is set on the warning about an approver group the policy does
	// not define: the group's name. An approver directory may define it;
	// see WithoutGroupsOf.
	Group string `json:"group,omitempty"`
}

// String formats the problem as "LINE:COL: message", or "LINE: message"
// when the column is unknown.
func (p Problem) String() string {
	switch {
	case p.Line > 0 && p.Column > 0:
		return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column) + ": " + p.Message
	case p.Line > 0:
		return strconv.Itoa(p.Line) + ": " + p.Message
	}
	return p.Message
}

// Errors is the error Parse, Load and ParseCases return for an invalid file.
// It lists every error found, in file order, not only the first.
type Errors struct {
	// File names the file the problems are in, when known (Load sets it).
	File     string
	Problems []Problem
}

// Error lists one problem per line, each as "FILE:LINE:COL: message", or
// "policy: LINE:COL: message" when the file is not named.
func (e *Errors) Error() string {
	if len(e.Problems) == 0 {
		return "policy: " + cmp.Or(e.File, "the policy") + " is invalid"
	}
	prefix := "policy: "
	if e.File != "" {
		prefix = e.File + ":"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(prefix)
		if e.File != "" && p.Line == 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects findings while a file is read.
type problems []Problem

func (ps *problems) add(line, col int, sev, format string, args ...any) {
	*ps = append(*ps, Problem{Line: line, Column: col, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// errors returns the errors only, sorted by position.
func (ps problems) errors() []Problem {
	var out []Problem
	for _, p := range ps {
		if p.Severity == SeverityError {
			out = append(out, p)
		}
	}
	sortProblems(out)
	return out
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlProblem turns an error of the YAML parser on data into a Problem,
// at the line at fault (see problemLine).
func yamlProblem(err error, data []byte) Problem {
	msg := err.Error()
	if m := yamlErrLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Line: problemLine(data, line, m[2]), Severity: SeverityError, Message: "YAML syntax: " + m[2]}
	}
	return Problem{Severity: SeverityError, Message: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

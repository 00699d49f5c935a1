package email

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Text from agents (summaries, arguments, questions, agent names) is shown
// to people who decide on it, so it must not be able to pass for
// Countersign's own words: in HTML it is escaped by html/template, and
// everywhere line breaks are kept only where a block of agent text is shown
// as such, control and bidirectional-override characters never.

// oneLine makes s a single line: control characters become spaces, runs of
// spaces shrink to one, bidi overrides disappear.
func oneLine(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case isBidiControl(r):
			continue
		case unicode.IsControl(r) || unicode.IsSpace(r):
			if !space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = true
		default:
			b.WriteRune(r)
			space = false
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// block keeps s's lines and tabs but drops other control characters and
// bidi overrides; CRLF and CR become LF.
func block(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case isBidiControl(r) || unicode.IsControl(r):
			return -1
		}
		return r
	}, s)
}

// quote prefixes every line of a block of agent text, so that in plain text
// it stands apart from the message around it.
func quote(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(block(s), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(prefix+l, " ")
	}
	return strings.Join(lines, "\n")
}

func isBidiControl(r rune) bool {
	return r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069' || r == '\u200e' || r == '\u200f' || r == '\u061c'
}

// cut shortens s to at most n runes, ending a cut text with "…".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n-1 {
			return strings.TrimRight(s[:j], " ") + "…"
		}
		i++
	}
	return s
}

// utc formats t for people in every time zone.
func utc(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// relative says how far t is from now: "in 3 hours 20 minutes", "in 2 days",
// "already passed".
func relative(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d <= 0 {
		return "already passed"
	}
	plural := func(n int64, unit string) string {
		if n == 1 {
			return fmt.Sprintf("1 %s", unit)
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	switch {
	case d < time.Minute:
		return "in less than a minute"
	case d < time.Hour:
		return "in " + plural(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
		if m == 0 {
			return "in " + plural(h, "hour")
		}
		return "in " + plural(h, "hour") + " " + plural(m, "minute")
	default:
		return "in " + plural(int64(d/(24*time.Hour)), "day")
	}
}

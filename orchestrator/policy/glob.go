package policy

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkGlob rejects globs that cannot mean what their author intended: '*'
// and '?' are the only wildcards, so brackets, braces and backslashes would
// match only themselves.
func checkGlob(g string) error {
	switch {
	case g == "":
		return errors.New("empty glob")
	case !utf8.ValidString(g):
		return fmt.Errorf("invalid glob %q: not valid UTF-8", g)
	case strings.TrimSpace(g) != g:
		return fmt.Errorf("invalid glob %q: leading or trailing space", g)
	case strings.ContainsAny(g, `[]{}\`):
		return fmt.Errorf("invalid glob %q: only * and ? are wildcards; [ ] { } and \\ are not supported", g)
	}
	return nil
}

// Match reports whether name matches glob, where '*' matches any run of
// characters (dots and slashes included) and '?' any one character (one
// UTF-8 encoded rune, not one byte).
func Match(glob, name string) bool {
	// Iterative wildcard matching with backtracking to the last '*'. Every
	// step advances by whole runes, so positions stay on rune boundaries.
	gi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(name) {
		if gi < len(glob) {
			switch c := glob[gi]; {
			case c == '*':
				if gi+1 == len(glob) {
					return true // a trailing '*' takes the rest
				}
				star, mark = gi, ni
				gi++
				continue
			case c == '?':
				gi++
				ni += runeLen(name, ni)
				continue
			case c == name[ni]:
				gi++
				ni++
				continue
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' take one more rune and retry after it. When an
		// ASCII literal follows the '*', skip straight to its next
		// occurrence (an ASCII byte is never inside a multi-byte rune).
		mark += runeLen(name, mark)
		if c := glob[star+1]; c != '*' && c != '?' && c < utf8.RuneSelf {
			for mark < len(name) && name[mark] != c {
				mark++
			}
			if mark == len(name) {
				return false
			}
		}
		gi, ni = star+1, mark
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}

// runeLen is the byte length of the rune at s[i:].
func runeLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}

// covers reports whether glob a matches every name glob b matches. It is
// sound (true only when that holds) and exact for the globs people write;
// it is what finds rules an earlier rule shadows.
func covers(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	if len(ar) > 256 || len(br) > 256 {
		return a == b || a == "*"
	}
	// memo[i][j]: 0 unknown, 1 true, 2 false, for ar[i:] covering br[j:].
	memo := make([][]uint8, len(ar)+1)
	for i := range memo {
		memo[i] = make([]uint8, len(br)+1)
	}
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if m := memo[i][j]; m != 0 {
			return m == 1
		}
		var ok bool
		switch {
		case i == len(ar):
			ok = j == len(br)
		case ar[i] == '*':
			// a's star matches nothing more, or absorbs b's next element
			// (a literal, a '?', or b's whole '*').
			ok = rec(i+1, j) || j < len(br) && rec(i, j+1)
		case j == len(br):
			ok = false
		case ar[i] == '?':
			ok = br[j] != '*' && rec(i+1, j+1)
		default:
			ok = br[j] == ar[i] && rec(i+1, j+1)
		}
		if ok {
			memo[i][j] = 1
		} else {
			memo[i][j] = 2
		}
		return ok
	}
	return rec(0, 0)
}

// glob is a compiled glob: the literal text before the first and after the
// last wildcard are checked first, and globs with '*' as their only
// wildcard are matched by searching for their literal parts in order, which
// is exact for them (the leftmost occurrence of each part leaves the most
// room for the rest). Globs with '?' fall back to Match.
type glob struct {
	pattern        string
	prefix, suffix string
	parts          []string // literal parts between stars ('*'-only globs)
	wild           bool     // has a wildcard
	question       bool     // has a '?'
}

func compileGlob(pattern string) glob {
	g := glob{pattern: pattern}
	first := strings.IndexAny(pattern, "*?")
	if first < 0 {
		g.prefix = pattern
		return g
	}
	g.wild = true
	g.question = strings.IndexByte(pattern, '?') >= 0
	last := strings.LastIndexAny(pattern, "*?")
	g.prefix, g.suffix = pattern[:first], pattern[last+1:]
	if !g.question {
		for p := range strings.SplitSeq(pattern[first:last+1], "*") {
			if p != "" {
				g.parts = append(g.parts, p)
			}
		}
	}
	return g
}

func (g *glob) match(s string) bool {
	if !g.wild {
		return s == g.prefix
	}
	if len(s) < len(g.prefix)+len(g.suffix) || !strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	if g.question {
		return Match(g.pattern, s)
	}
	mid := s[len(g.prefix) : len(s)-len(g.suffix)]
	for _, p := range g.parts {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

func compileGlobs(patterns []string) []glob {
	if len(patterns) == 0 {
		return nil
	}
	out := make([]glob, len(patterns))
	for i, p := range patterns {
		out[i] = compileGlob(p)
	}
	return out
}

package policy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCovers(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"*", "anything", true},
		{"*", "a*b?c", true},
		{"*", "", true},
		{"db.*", "db.delete*", true},
		{"db.*", "db.*", true},
		{"db.*", "db", false},
		{"db.*", "d*", false},
		{"*.send", "email.send", true},
		{"*.send", "*.send", true},
		{"*.send", "email.*", false},
		{"a?c", "abc", true},
		{"a?c", "a?c", true},
		{"a?c", "a*c", false},
		{"a*", "a?", true},
		{"?", "*", false},
		{"*a*", "*a*a*", true},
		{"*a*a*", "*a*", false},
		{"exact", "exact", true},
		{"exact", "exac?", false},
		{"", "", true},
		{"", "*", false},
		{"é*", "é?x", true},
		{"??", "é?", true},
	}
	for _, tt := range tests {
		if got := covers(tt.a, tt.b); got != tt.want {
			t.Errorf("covers(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzCovers checks that covers is sound: when it says a covers b, every
// name built from b (wildcards filled in several ways) matches a.
func FuzzCovers(f *testing.F) {
	f.Add("db.*", "db.delete*", "x")
	f.Add("*a*", "*a*a*", "")
	f.Add("a?c", "abc", "é")
	f.Fuzz(func(t *testing.T, a, b, fill string) {
		if len(a) > 24 || len(b) > 24 || len(fill) > 8 || !utf8.ValidString(a) || !utf8.ValidString(b) || !utf8.ValidString(fill) {
			return
		}
		if !covers(a, b) {
			return
		}
		one := "x"
		if r, _ := utf8.DecodeRuneInString(fill); fill != "" {
			one = string(r)
		}
		for _, star := range []string{"", fill, one, fill + fill} {
			name := strings.NewReplacer("*", star, "?", one).Replace(b)
			if Match(b, name) && !Match(a, name) {
				t.Fatalf("covers(%q, %q) but %q matches only b", a, b, name)
			}
		}
	})
}

// FuzzCompiledGlob checks the compiled globs rules use against Match.
func FuzzCompiledGlob(f *testing.F) {
	for _, s := range [][2]string{{"db.*", "db.query"}, {"a*b?c", "axxbyc"}, {"ab*ba", "aba"}, {"*.admin_*", "x.admin_y"}, {"a*a*a", "aaa"}, {"x", "x"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if checkGlob(pattern) != nil || !utf8.ValidString(name) {
			return
		}
		g := compileGlob(pattern)
		if got, want := g.match(name), Match(pattern, name); got != want {
			t.Fatalf("compiled %q on %q = %v, Match says %v", pattern, name, got, want)
		}
	})
}

package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the documents whose links are checked: the README and the
// reference under docs/, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md", "../deploy/README.md", "../deploy/policies/README.md"}, files...)
}

// Every relative link in the README and docs/*.md leads somewhere: the
// file or directory exists, and an #anchor names a heading of the target
// as GitHub slugs it.
func TestDocsLinksResolve(t *testing.T) {
	files := docFiles(t)
	if len(files) < 5 {
		t.Fatalf("found only %v: the reference under docs/ is missing", files)
	}
	checked := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(src)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			if err := resolveLink(file, l.target); err != nil {
				t.Errorf("%s:%d: link [%s](%s): %v", rel(file), l.line, l.text, l.target, err)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links checked: the link pattern no longer matches the documents", checked)
	}
}

// The checker itself: slugs as GitHub makes them, links found outside
// code only, a broken anchor and a missing file reported.
func TestDocsLinkChecker(t *testing.T) {
	for heading, want := range map[string]string{
		"Time: expiry, reminders and escalation": "time-expiry-reminders-and-escalation",
		"Two of three, step by step":             "two-of-three-step-by-step",
		"`POST /v1/reviews` and `?wait=`":        "post-v1reviews-and-wait",
		"What it guarantees":                     "what-it-guarantees",
		"Grants — standing approvals":            "grants--standing-approvals",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	src := "# A\n\n`é` — see [b](#b) and [the\nother](x.md#y).\n\n```sh\n# not a heading [c](#c)\n```\n\n`[d](#d)`\n\n## B\n"
	links := markdownLinks(src)
	if len(links) != 2 || links[0].text != "b" || links[0].target != "#b" ||
		links[1].text != "the other" || links[1].target != "x.md#y" || links[1].line != 3 {
		t.Fatalf("links %+v", links)
	}
	if got := anchors(src); fmt.Sprint(got) != "map[a:true b:true]" {
		t.Fatalf("anchors %v", got)
	}
	dir := t.TempDir()
	doc := filepath.Join(dir, "doc.md")
	if err := os.WriteFile(doc, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := resolveLink(doc, "#b"); err != nil {
		t.Errorf("#b: %v", err)
	}
	if err := resolveLink(doc, "doc.md#a"); err != nil {
		t.Errorf("doc.md#a: %v", err)
	}
	if resolveLink(doc, "#c") == nil {
		t.Error("#c (a comment in a code block) resolved")
	}
	if resolveLink(doc, "missing.md") == nil {
		t.Error("missing.md resolved")
	}
}

type mdLink struct {
	text, target string
	line         int
}

var (
	fence      = regexp.MustCompile("(?m)^ {0,3}(```|~~~)[^\n]*\n(?s:.*?)\n {0,3}(```|~~~)[ \t]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	linkRE     = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE  = regexp.MustCompile(`(?m)^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$`)
)

// prose blanks fenced code blocks and code spans, keeping line numbers.
func prose(src string) string {
	blank := func(s string) string { // byte for byte, so offsets stay valid
		b := []byte(s)
		for i := range b {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
		return string(b)
	}
	src = fence.ReplaceAllStringFunc(src, blank)
	return inlineCode.ReplaceAllStringFunc(src, blank)
}

// markdownLinks returns the links and images of src outside code.
func markdownLinks(src string) []mdLink {
	text := prose(src)
	var out []mdLink
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, mdLink{
			text:   strings.Join(strings.Fields(src[m[2]:m[3]]), " "),
			target: text[m[4]:m[5]],
			line:   strings.Count(text[:m[0]], "\n") + 1,
		})
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of src: a slug per
// heading, -1, -2, … for repeats.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(keepCodeText(src), -1) {
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// keepCodeText blanks fenced blocks but keeps the text of code spans, which
// GitHub keeps in a heading's slug.
func keepCodeText(src string) string {
	return fence.ReplaceAllStringFunc(src, func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
}

// slug is GitHub's anchor for a heading: lower case, letters, digits,
// spaces, hyphens and underscores kept, spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// resolveLink checks a relative target of a link in file.
func resolveLink(file, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("%s does not exist", rel(dest))
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Errorf("an anchor into %s, which is not markdown", rel(dest))
	}
	src, err := os.ReadFile(dest)
	if err != nil {
		return err
	}
	if !anchors(string(src))[anchor] {
		return fmt.Errorf("%s has no heading with the anchor #%s", rel(dest), anchor)
	}
	return nil
}

// rel names a file from the repository root.
func rel(path string) string {
	if r, err := filepath.Rel("..", path); err == nil {
		return r
	}
	return path
}

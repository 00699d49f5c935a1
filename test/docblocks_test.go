package test

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every fenced code block of README.md and docs/*.md is accounted for: the
// line right before its opening fence is an HTML comment (invisible on
// GitHub) that says what holds it.
//
//	<!-- run: TestName -->   a test runs it as written. TestName is a Go
//	                         test function of the repository, or the path
//	                         of a test file of another language (such as
//	                         contracts/typescript/test/snippets.test.ts);
//	                         the file that defines it names the document,
//	                         so a marker cannot claim a test that never
//	                         reads it.
//	<!-- check: KIND -->     this test checks it by kind (docChecks: policy,
//	                         config, directory, json, go, cli, yaml).
//	<!-- not run: why -->    nothing can hold it (output shown for
//	                         illustration, a command that needs Slack or an
//	                         identity provider, a diagram); why is said.
//
// The README is near its length limit, so its blocks may instead be
// accounted for by readmeSections below, by section.

// readmeSections are sections of README.md whose blocks a test runs in
// order, failing on any block of the section it does not run; a block of
// such a section needs no marker.
var readmeSections = []struct{ heading, test string }{
	{"## Quickstart", "TestQuickstart"},
}

// mdBlock is one fenced code block of a document.
type mdBlock struct {
	file       string // relative to the repository root
	line       int    // of the opening fence
	lang, text string // text without the fence's indentation
	section    string // the nearest heading above it
	mark       string // run, check or not run; "" for none
	arg        string // the test, the kind or the reason
}

var (
	openFence  = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})[ \t]*([^ \t`]*)")
	blockMark  = regexp.MustCompile(`^<!--\s*(run|check|not run):\s*(.*?)\s*-->$`)
	mdHeadings = regexp.MustCompile(`^#{1,6} `)
)

// readMDBlocks returns the fenced blocks of file, relative to the
// repository root.
func readMDBlocks(t *testing.T, file string) []mdBlock {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	var out []mdBlock
	section := ""
	for i := 0; i < len(lines); i++ {
		if mdHeadings.MatchString(lines[i]) {
			section = lines[i]
		}
		m := openFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := mdBlock{file: file, line: i + 1, lang: m[3], section: section}
		if i > 0 {
			if mk := blockMark.FindStringSubmatch(strings.TrimSpace(lines[i-1])); mk != nil {
				b.mark, b.arg = mk[1], mk[2]
			}
		}
		closing := regexp.MustCompile("^[ \t]*" + regexp.QuoteMeta(m[2][:1]) + "{" + fmt.Sprint(len(m[2])) + ",}[ \t]*$")
		var body []string
		for i++; i < len(lines) && !closing.MatchString(lines[i]); i++ {
			body = append(body, strings.TrimPrefix(lines[i], m[1]))
		}
		if i == len(lines) {
			t.Errorf("%s:%d: a code block that is never closed", file, b.line)
		}
		b.text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out
}

// docsWithBlocks are README.md and every docs/*.md, relative to the
// repository root.
func docsWithBlocks(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(rel(f)))
	}
	return out
}

func TestEveryDocBlockIsAccountedFor(t *testing.T) {
	tests := repoTests(t)
	checks := docChecks(t)
	counts := map[string]map[string]int{}
	total := 0
	for _, file := range docsWithBlocks(t) {
		counts[file] = map[string]int{}
		for _, b := range readMDBlocks(t, file) {
			total++
			kind, err := accountFor(b, tests, checks)
			counts[file][kind]++
			if err != nil {
				t.Errorf("%s:%d: a %q block: %v\n%s", b.file, b.line, b.lang, err, b.text)
			}
		}
	}
	if total < 50 {
		t.Fatalf("found only %d code blocks: the fence pattern no longer reads the documents", total)
	}
	for _, file := range slices.Sorted(maps.Keys(counts)) {
		c := counts[file]
		t.Logf("%-28s run %2d  checked %2d  not run %2d", file, c["run"], c["check"], c["not run"])
	}
}

// accountFor says how b is held: "run", "check" or "not run", and why it
// is not held when it is not.
func accountFor(b mdBlock, tests map[string][]string, checks map[string]func(mdBlock) error) (string, error) {
	mark, arg := b.mark, b.arg
	if mark == "" && b.file == "README.md" {
		for _, s := range readmeSections {
			if b.section == s.heading {
				mark, arg = "run", s.test
			}
		}
	}
	switch mark {
	case "run":
		return mark, runBy(b.file, arg, tests)
	case "check":
		check, ok := checks[arg]
		if !ok {
			return mark, fmt.Errorf("<!-- check: %s -->: no such kind (%s)", arg, strings.Join(slices.Sorted(maps.Keys(checks)), ", "))
		}
		return mark, check(b)
	case "not run":
		if len(strings.Fields(arg)) < 3 {
			return mark, fmt.Errorf("<!-- not run: %s -->: say why in words", arg)
		}
		return mark, nil
	}
	return "unmarked", fmt.Errorf("no marker on the line before it: <!-- run: TestName -->, <!-- check: KIND --> or <!-- not run: why -->")
}

// runBy checks a run marker: the test exists, and a file that defines it
// names doc.
func runBy(doc, test string, tests map[string][]string) error {
	files := tests[test]
	if strings.Contains(test, "/") {
		files = nil
		if _, err := os.Stat(filepath.Join("..", test)); err != nil {
			return fmt.Errorf("<!-- run: %s -->: no such test file", test)
		}
		files = append(files, test)
	}
	if len(files) == 0 {
		return fmt.Errorf("<!-- run: %s -->: no test of the repository has that name", test)
	}
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join("..", f))
		if err == nil && strings.Contains(string(src), doc) {
			return nil
		}
	}
	return fmt.Errorf("<!-- run: %s -->: %s, which defines it, does not name %s", test, strings.Join(files, ", "), doc)
}

// testFunc finds the Go test functions a file defines.
var testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\)`)

// repoTests maps each Go test function of the repository to the files
// (relative to the repository root) that define one of that name.
func repoTests(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != ".." && (name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = append(out[m[1]], filepath.ToSlash(rel(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("found only %d test functions: the walk missed the repository", len(out))
	}
	return out
}

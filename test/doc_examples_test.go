package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The docs' code examples run as written: each test below reads the code
// blocks of one document (or one section of it), runs every one of them
// against a server started as make run starts it (deploy/policy.yaml), and
// fails on a block it did not run unless the document marks it, right
// before the block, with `<!-- not run: why -->`, or as checked by kind or
// run by another test (`<!-- check: KIND -->`, `<!-- run: TestName -->`;
// see docblocks_test.go).

// docExamples are the code blocks of a document or one of its sections.
type docExamples struct {
	file   string
	blocks []*docBlock
}

type docBlock struct {
	lang, text string
	line       int
	notRun     string // why the document does not have it run
	check      string // the kind of check that holds it instead
	runBy      string // the test the document says runs it
	ran        bool
}

var (
	notRunMark = regexp.MustCompile(`<!--\s*not run:\s*(.*?)\s*-->\s*$`)
	otherMark  = regexp.MustCompile(`<!--\s*(check|run):\s*(.*?)\s*-->\s*$`)
)

// readDocExamples reads the code blocks of file (relative to the
// repository root) under heading (a whole line such as "# Go library", up
// to the next heading of its level or above), or of the whole file when
// heading is "".
func readDocExamples(t *testing.T, file, heading string) *docExamples {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	text, offset := string(src), 0
	if heading != "" {
		start := strings.Index(text, "\n"+heading+"\n")
		if start < 0 {
			t.Fatalf("%s has no %q section", file, heading)
		}
		level := strings.Fields(heading)[0]
		end := len(text)
		for _, h := range regexp.MustCompile(`(?m)^#+ `).FindAllStringIndex(text[start+1+len(heading):], -1) {
			if h[1]-h[0]-1 <= len(level) {
				end = start + 1 + len(heading) + h[0]
				break
			}
		}
		text, offset = text[start:end], start
	}
	d := &docExamples{file: file}
	for _, m := range fencedBlock.FindAllStringSubmatchIndex(text, -1) {
		b := &docBlock{lang: text[m[2]:m[3]], text: text[m[4]:m[5]],
			line: strings.Count(string(src[:offset+m[0]]), "\n") + 1}
		before := strings.TrimRight(text[:m[0]], "\n")
		if mark := notRunMark.FindStringSubmatch(before); mark != nil {
			b.notRun = mark[1]
		}
		if mark := otherMark.FindStringSubmatch(before); mark != nil && mark[1] == "check" {
			b.check = mark[2]
		} else if mark != nil {
			b.runBy = mark[2]
		}
		d.blocks = append(d.blocks, b)
	}
	return d
}

// take returns the one block in lang that contains every one of has, and
// counts it as run.
func (d *docExamples) take(t *testing.T, lang string, has ...string) *docBlock {
	t.Helper()
	var found *docBlock
	for _, b := range d.blocks {
		ok := b.lang == lang
		for _, s := range has {
			ok = ok && strings.Contains(b.text, s)
		}
		if !ok {
			continue
		}
		if found != nil {
			t.Fatalf("%s: two %s blocks hold %q (lines %d and %d)", d.file, lang, has, found.line, b.line)
		}
		found = b
	}
	if found == nil {
		t.Fatalf("%s: no %s block holds %q; update this test with what the document shows", d.file, lang, has)
	}
	if found.notRun != "" {
		t.Fatalf("%s:%d is marked not run (%s), but this test runs it", d.file, found.line, found.notRun)
	}
	found.ran = true
	return found
}

// allRun fails the test for each block that was neither run nor marked,
// and for each the document says this test runs that it did not run.
func (d *docExamples) allRun(t *testing.T) {
	t.Helper()
	test, _, _ := strings.Cut(t.Name(), "/")
	for _, b := range d.blocks {
		if !b.ran && b.runBy == test {
			t.Errorf("%s:%d: marked <!-- run: %s -->, but this test does not run it:\n%s", d.file, b.line, test, b.text)
		}
		if !b.ran && b.notRun == "" && b.check == "" && b.runBy == "" {
			t.Errorf("%s:%d: a %s block no test runs; run it here, or mark it <!-- not run: why --> in the document:\n%s",
				d.file, b.line, b.lang, b.text)
		}
	}
}

// shell returns the block's commands, as words.
func (b *docBlock) shell(t *testing.T) [][]string {
	t.Helper()
	cmds, err := shellWords(b.text)
	if err != nil {
		t.Fatalf("line %d: %v:\n%s", b.line, err, b.text)
	}
	return cmds
}

// docShell runs the docs' shell commands as a reader of the docs would on
// the machine that runs serve: in a directory holding bin/countersign and
// the server's ./data, with no COUNTERSIGN_URL or COUNTERSIGN_TOKEN (the
// CLI finds the local serve and its development token there). Variables
// such as $ID and placeholders such as <event_id> are the test's to set.
type docShell struct {
	p    *serveProc
	dir  string
	addr string // the address the docs' URLs name (make run's)
	vars map[string]string
}

func newDocShell(t *testing.T, p *serveProc, addr string) *docShell {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, "bin", "countersign")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p.data, filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	return &docShell{p: p, dir: dir, addr: addr, vars: map[string]string{}}
}

var shellVar = regexp.MustCompile(`\$[A-Z][A-Z0-9_]*|<[a-z_]+>`)

func (s *docShell) expand(t *testing.T, w string) string {
	t.Helper()
	return shellVar.ReplaceAllStringFunc(w, func(v string) string {
		val, ok := s.vars[strings.Trim(v, "$<>")]
		if !ok {
			t.Fatalf("%q: the test set no value for %s", w, v)
		}
		return val
	})
}

// env is the environment of a command: the test's variables, and neither
// COUNTERSIGN_URL nor COUNTERSIGN_TOKEN.
func (s *docShell) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COUNTERSIGN_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GORACE=atexit_sleep_ms=0")
	for k, v := range s.vars {
		env = append(env, k+"="+v)
	}
	return env
}

// run runs one command of words (bin/countersign or countersign) and
// returns its output; a failure fails the test.
func (s *docShell) run(t *testing.T, cmd []string) string {
	t.Helper()
	out, err := s.runErr(t, cmd)
	if err != nil {
		t.Fatalf("%q: %v\n%s", cmd, err, out)
	}
	return out
}

func (s *docShell) runErr(t *testing.T, cmd []string) (string, error) {
	t.Helper()
	if cmd[0] != "bin/countersign" && cmd[0] != "countersign" {
		t.Fatalf("want a countersign command, got %q", cmd)
	}
	args := make([]string, len(cmd)-1)
	for i, w := range cmd[1:] {
		args[i] = s.expand(t, w)
	}
	c := exec.Command(filepath.Join(s.dir, "bin", "countersign"), args...)
	c.Dir, c.Env = s.dir, s.env()
	out, err := c.CombinedOutput()
	return string(out), err
}

// bash runs src with bash in the shell's directory, bin/ on the PATH.
func (s *docShell) bash(t *testing.T, src string) string {
	t.Helper()
	out, err := s.bashErr(src)
	if err != nil {
		t.Fatalf("bash: %v\n%s\n%s", err, src, out)
	}
	return out
}

// bashErr runs src as bash does, and returns its output and its failure.
func (s *docShell) bashErr(src string) (string, error) {
	c := exec.Command("bash", "-euo", "pipefail", "-c", src)
	c.Dir = s.dir
	c.Env = append(s.env(), "PATH="+filepath.Join(s.dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := c.CombinedOutput()
	return string(out), err
}

// curl sends what a curl command of the docs sends, to this server.
func (s *docShell) curl(ctx context.Context, t *testing.T, cmd []string) httpAnswer {
	t.Helper()
	q := &quickShell{p: s.p, base: "http://" + s.addr, token: s.p.token}
	expanded := make([]string, len(cmd))
	for i, w := range cmd {
		expanded[i] = s.expand(t, strings.ReplaceAll(w, "$TOKEN", s.p.token))
	}
	return q.curl(ctx, t, expanded)
}

// reviewOne submits one call of run and returns its result.
func reviewOne(t *testing.T, p *serveProc, run map[string]any, call map[string]any) map[string]any {
	t.Helper()
	var ans struct {
		Results []map[string]any `json:"results"`
	}
	if code := p.call("POST", "/v1/reviews", map[string]any{"run": run, "tool_calls": []any{call}}, &ans); code != http.StatusOK || len(ans.Results) != 1 {
		t.Fatalf("review of %v: %d %v", call, code, ans.Results)
	}
	return ans.Results[0]
}

// pendingPayment submits a payment under the shipped policy's payments rule
// and returns its approval's id.
func pendingPayment(t *testing.T, p *serveProc, runID, callID string) string {
	t.Helper()
	r := reviewOne(t, p, map[string]any{"id": runID, "agent": "billing-bot", "requested_by": "carol"},
		map[string]any{"id": callID, "name": "payments_send",
			"arguments": map[string]any{"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}})
	if r["verdict"] != "pending" || r["rule"] != "payments" {
		t.Fatalf("%s/%s: %v, want pending under the payments rule", runID, callID, r)
	}
	return r["event_id"].(string)
}

// status reads an approval's status, waiting up to 10 s for a decision.
func (p *serveProc) status(t *testing.T, id string) string {
	t.Helper()
	var rec struct {
		Record struct{ Status string } `json:"record"`
	}
	if code := p.call("GET", "/v1/approvals/"+id+"?wait=10s", nil, &rec); code != http.StatusOK {
		t.Fatalf("approval %s: %d", id, code)
	}
	return rec.Record.Status
}

// changes follows GET /v1/events; next returns once the server has
// announced a change since the last call.
type changes struct {
	sc   *bufio.Scanner
	stop context.CancelFunc
}

func followChanges(t *testing.T, p *serveProc) *changes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /v1/events: %v %v", err, resp)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return &changes{sc: bufio.NewScanner(resp.Body), stop: cancel}
}

func (c *changes) next(t *testing.T) {
	t.Helper()
	for c.sc.Scan() {
		if c.sc.Text() == "" {
			return
		}
	}
	t.Fatalf("the event stream ended: %v", c.sc.Err())
}

// pendingOf returns the ids of a run's pending approvals once there are n,
// reading again on each change the server announces.
func pendingOf(t *testing.T, p *serveProc, ch *changes, runID string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var page struct {
			Items []struct {
				Record struct {
					Request struct {
						EventID string `json:"event_id"`
					} `json:"request"`
				} `json:"record"`
			} `json:"items"`
		}
		if code := p.call("GET", "/v1/approvals?status=pending&run_id="+runID, nil, &page); code != http.StatusOK {
			t.Fatalf("list pending of %s: %d", runID, code)
		}
		if len(page.Items) >= n {
			var ids []string
			for _, it := range page.Items {
				ids = append(ids, it.Record.Request.EventID)
			}
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %d pending approvals, want %d", runID, len(page.Items), n)
		}
		ch.next(t)
	}
}

// mustJSON is v as JSON.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hasShape reports the first key of shown (recursively into objects) that
// got lacks; "" if got has them all.
func hasShape(shown, got any) string {
	s, ok := shown.(map[string]any)
	if !ok {
		return ""
	}
	g, ok := got.(map[string]any)
	if !ok {
		return "(an object)"
	}
	for k, v := range s {
		gv, ok := g[k]
		if !ok {
			return k
		}
		if miss := hasShape(v, gv); miss != "" {
			return k + "." + miss
		}
	}
	return ""
}

func fmtLines(lines []string) string { return fmt.Sprintf("%q", lines) }

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuickstart runs the README's quickstart as a reader would: the
// commands of its code blocks, in order, against `countersign serve`
// started as `make run` starts it. The request bodies, URLs and CLI
// arguments are read from the README itself, and the answers it shows are
// checked, so an edit of the quickstart is tested as written.
func TestQuickstart(t *testing.T) {
	q := readQuickstart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. Start everything.
	if cmds := q.shell(t); len(cmds) != 1 || strings.Join(cmds[0], " ") != "make run" {
		t.Fatalf("README quickstart step 1: want `make run`, got %q", cmds)
	}
	flags, addr := makeRun(t)
	p := startServeBinary(t, binary, t.TempDir(), flags...)
	sh := &quickShell{p: p, base: "http://" + addr}

	// 2. An agent asks to run two tools.
	cmds := q.shell(t)
	if len(cmds) != 2 {
		t.Fatalf("README quickstart step 2: want `export TOKEN=…` and a curl, got %q", cmds)
	}
	sh.export(t, cmds[0])
	first := sh.curl(ctx, t, cmds[1])
	if first.status != http.StatusOK {
		t.Fatalf("step 2: review answered %d: %s", first.status, first.body)
	}
	var shown, got reviewAnswerJSON
	if err := json.Unmarshal([]byte(q.next(t, "json").text), &shown); err != nil {
		t.Fatalf("README quickstart step 2: the answer it shows is not JSON: %v", err)
	}
	first.decode(t, &got)
	matchShown(t, "step 2", shown, got)
	var eventID string
	for _, r := range got.Results {
		if r["verdict"] == "pending" {
			eventID, _ = r["event_id"].(string)
		}
	}
	if eventID == "" {
		t.Fatalf("step 2: no pending call with an event_id in %s", first.body)
	}
	sh.eventID = eventID

	// 3. The agent waits: the same review with ?wait= re-attaches and
	// answers once a human has decided.
	cmds = q.shell(t)
	if len(cmds) != 1 {
		t.Fatalf("README quickstart step 3: want one curl, got %q", cmds)
	}
	waitCmd := cmds[0]
	waited := make(chan httpAnswer, 1)
	go func() { waited <- sh.curlErr(ctx, waitCmd) }()

	// 4. A human decides.
	cmds = q.shell(t)
	if len(cmds) != 3 || !strings.HasSuffix(cmds[0][0], "countersign") || cmds[0][1] != "approvals" {
		t.Fatalf("README quickstart step 4: want three `bin/countersign approvals` commands, got %q", cmds)
	}
	if out := sh.cli(t, cmds[0]); !strings.Contains(out, eventID[:8]) || !strings.Contains(out, "payments.send") {
		t.Fatalf("step 4: %q does not list the pending approval %s:\n%s", cmds[0], eventID, out)
	}
	out := sh.cli(t, cmds[1])
	if !strings.Contains(out, eventID) || !strings.Contains(out, "pending") {
		t.Fatalf("step 4: %q does not show the pending approval %s:\n%s", cmds[1], eventID, out)
	}
	select {
	case a := <-waited:
		t.Fatalf("step 3: the waiting review answered before anyone decided: %d %s %v", a.status, a.body, a.err)
	default:
	}
	if out := sh.cli(t, cmds[2]); !strings.Contains(out, "Vote counted: approve "+eventID+". Status is now approved.") {
		t.Fatalf("step 4: %q:\n%s", cmds[2], out)
	}
	a := <-waited
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("step 3: the waiting review: %d %s %v", a.status, a.body, a.err)
	}
	var decided reviewAnswerJSON
	a.decode(t, &decided)
	if len(decided.Results) != 1 || decided.Results[0]["verdict"] != "allowed" || decided.Results[0]["event_id"] != eventID {
		t.Fatalf("step 3: after the approval the waiting review answered %s, want allowed for %s", a.body, eventID)
	}
	var asked struct {
		ToolCalls []struct {
			Arguments any `json:"arguments"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(curlBody(waitCmd), &asked); err != nil || len(asked.ToolCalls) != 1 {
		t.Fatalf("step 3: the body the README sends: %v", err)
	}
	if !jsonEqual(decided.Results[0]["arguments"], asked.ToolCalls[0].Arguments) {
		t.Fatalf("step 3: allowed with arguments %v, want the ones asked for, %v", decided.Results[0]["arguments"], asked.ToolCalls[0].Arguments)
	}

	// The claim: once, then 409 already_claimed.
	cmds = q.shell(t)
	if len(cmds) != 1 {
		t.Fatalf("README quickstart: want one claim curl, got %q", cmds)
	}
	if c := sh.curl(ctx, t, cmds[0]); c.status != http.StatusOK {
		t.Fatalf("claim: %d %s", c.status, c.body)
	}
	again := sh.curl(ctx, t, cmds[0])
	var refusal struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	again.decode(t, &refusal)
	if again.status != http.StatusConflict || refusal.Error.Code != "already_claimed" || refusal.Error.Message == "" {
		t.Fatalf("second claim: %d %s, want 409 already_claimed", again.status, again.body)
	}
	if !strings.Contains(q.section, "`409 already_claimed`") {
		t.Error("the README no longer says what a second claim answers; update this test with it")
	}

	// 6. Make approval depend on the arguments.
	cmds = q.shell(t)
	if len(cmds) != 3 {
		t.Fatalf("README quickstart step 6: want policy lint, test and apply, got %q", cmds)
	}
	for i, want := range []string{"policy lint", "policy test", "policy apply"} {
		if got := strings.Join(cmds[i][1:3], " "); got != want {
			t.Fatalf("step 6: command %d is %q, want %s", i+1, cmds[i], want)
		}
	}
	if out := sh.cli(t, cmds[0]); !strings.Contains(out, "ok") {
		t.Fatalf("step 6: %q:\n%s", cmds[0], out)
	}
	sh.cli(t, cmds[1]) // fails the test unless every case passes
	if out := sh.cli(t, cmds[2]); !strings.Contains(out, "Applied policy version payments-") {
		t.Fatalf("step 6: %q:\n%s", cmds[2], out)
	}

	cmds = q.shell(t)
	if len(cmds) != 1 {
		t.Fatalf("README quickstart step 6: want one ?explain=1 curl, got %q", cmds)
	}
	ex := sh.curl(ctx, t, cmds[0])
	if ex.status != http.StatusOK {
		t.Fatalf("step 6: explain review: %d %s", ex.status, ex.body)
	}
	var explained struct {
		Results []struct {
			ToolCallID string `json:"tool_call_id"`
			Verdict    string `json:"verdict"`
			EventID    string `json:"event_id"`
			Rule       string `json:"rule"`
			Explain    *struct {
				Rule  string            `json:"rule"`
				Error string            `json:"error"`
				Steps []json.RawMessage `json:"steps"`
			} `json:"explain"`
		} `json:"results"`
	}
	ex.decode(t, &explained)
	// What the README says of the three calls.
	want := []struct{ id, verdict, rule string }{
		{"coffee", "allowed", "small-payments"},
		{"invoice", "pending", "large-in-production"},
		{"typo", "pending", ""},
	}
	if len(explained.Results) != len(want) {
		t.Fatalf("step 6: %d results, want %d: %s", len(explained.Results), len(want), ex.body)
	}
	for i, w := range want {
		r := explained.Results[i]
		for _, s := range []string{w.id, w.verdict, w.rule} {
			if s != "" && !strings.Contains(q.section, "`"+s+"`") {
				t.Errorf("the README no longer says `%s` of the explained review; update this test with what it says", s)
			}
		}
		if r.ToolCallID != w.id || r.Verdict != w.verdict || (w.rule != "" && r.Rule != w.rule) {
			t.Errorf("step 6: %s: %s by %q, want %s by %q", r.ToolCallID, r.Verdict, r.Rule, w.verdict, w.rule)
		}
		if r.Explain == nil || len(r.Explain.Steps) == 0 {
			t.Errorf("step 6: %s has no explanation rule by rule", w.id)
		}
	}
	typo := explained.Results[2]
	if typo.Explain == nil || typo.Explain.Error == "" {
		t.Fatalf("step 6: typo: explain.error is empty: %s", ex.body)
	}
	var rec struct {
		Record struct {
			Request struct {
				Policy struct {
					Error string `json:"error"`
				} `json:"policy"`
			} `json:"request"`
		} `json:"record"`
	}
	if code := p.call("GET", "/v1/approvals/"+typo.EventID, nil, &rec); code != http.StatusOK || rec.Record.Request.Policy.Error == "" {
		t.Fatalf("step 6: typo's request: %d, policy.error %q", code, rec.Record.Request.Policy.Error)
	}

	if b, ok := q.peek(); ok {
		t.Errorf("README quickstart has a code block this test does not run (line %d):\n%s", b.line, b.text)
	}
}

// curlBody is the -d argument of a curl command.
func curlBody(cmd []string) []byte {
	for i, w := range cmd {
		if w == "-d" && i+1 < len(cmd) {
			return []byte(cmd[i+1])
		}
	}
	return nil
}

// quickstart is the README's Quickstart section and its code blocks, read
// one by one.
type quickstart struct {
	section string
	blocks  []codeBlock
}

type codeBlock struct {
	lang, text string
	line       int
}

var fencedBlock = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```[ \t]*$")

func readQuickstart(t *testing.T) *quickstart {
	t.Helper()
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start := strings.Index(text, "\n## Quickstart\n")
	if start < 0 {
		t.Fatal("README.md has no `## Quickstart` section")
	}
	end := strings.Index(text[start+1:], "\n## ")
	if end < 0 {
		end = len(text) - start - 1
	}
	section := text[start : start+1+end]
	q := &quickstart{section: section}
	for _, m := range fencedBlock.FindAllStringSubmatchIndex(section, -1) {
		q.blocks = append(q.blocks, codeBlock{
			lang: section[m[2]:m[3]], text: section[m[4]:m[5]],
			line: strings.Count(text[:start+m[0]], "\n") + 1,
		})
	}
	return q
}

// next returns the next code block, which must be in lang.
func (q *quickstart) next(t *testing.T, lang string) codeBlock {
	t.Helper()
	if len(q.blocks) == 0 {
		t.Fatalf("README quickstart: ran out of code blocks, wanted a %s block", lang)
	}
	b := q.blocks[0]
	q.blocks = q.blocks[1:]
	if b.lang != lang {
		t.Fatalf("README.md:%d: a %q block where the quickstart test expects %q:\n%s", b.line, b.lang, lang, b.text)
	}
	return b
}

func (q *quickstart) peek() (codeBlock, bool) {
	if len(q.blocks) == 0 {
		return codeBlock{}, false
	}
	return q.blocks[0], true
}

// shell returns the commands of the next sh block, as words.
func (q *quickstart) shell(t *testing.T) [][]string {
	t.Helper()
	b := q.next(t, "sh")
	cmds, err := shellWords(b.text)
	if err != nil {
		t.Fatalf("README.md:%d: %v:\n%s", b.line, err, b.text)
	}
	return cmds
}

// shellWords splits sh source into commands of words as sh would: quotes,
// backslash-newline, comments; $(…) and $VAR are kept as written.
func shellWords(src string) ([][]string, error) {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		in    bool // a word is open
	)
	endWord := func() {
		if in {
			words = append(words, word.String())
			word.Reset()
			in = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
			i++
		case c == '\\' && i+1 < len(src):
			word.WriteByte(src[i+1])
			in = true
			i++
		case c == '\n' || c == ';':
			endCmd()
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !in:
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
		case c == '\'':
			j := strings.IndexByte(src[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' at offset %d", i)
			}
			word.WriteString(src[i+1 : i+1+j])
			in = true
			i += j + 1
		case c == '"':
			j := strings.IndexByte(src[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated \" at offset %d", i)
			}
			word.WriteString(src[i+1 : i+1+j])
			in = true
			i += j + 1
		case c == '$' && i+1 < len(src) && src[i+1] == '(':
			j := strings.IndexByte(src[i:], ')')
			if j < 0 {
				return nil, fmt.Errorf("unterminated $( at offset %d", i)
			}
			word.WriteString(src[i : i+j+1])
			in = true
			i += j
		default:
			word.WriteByte(c)
			in = true
		}
	}
	endCmd()
	return cmds, nil
}

// makeRun reads the Makefile's run target: the serve flags it passes (paths
// made relative to test/; --data and --addr left to the test, which picks
// its own) and the address the README's URLs name.
func makeRun(t *testing.T) (flags []string, addr string) {
	t.Helper()
	src, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ADDR\s*\?=\s*(\S+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("Makefile: no ADDR ?= default")
	}
	addr = string(m[1])
	recipe := regexp.MustCompile(`(?m)^run:.*\n(?:\t.*\n)*?\t(?:exec )?\$\(BIN\) serve (.*)$`).FindSubmatch(src)
	if recipe == nil {
		t.Fatal("Makefile: the run target does not run $(BIN) serve")
	}
	words := strings.Fields(string(recipe[1]))
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case w == "--data" || w == "--addr" || w == "--nats-listen":
			i++ // this test chooses its own
		case strings.HasPrefix(w, "$"):
			t.Fatalf("Makefile: run passes %q, which this test does not know", w)
		default:
			if _, err := os.Stat(filepath.Join("..", w)); err == nil && !strings.HasPrefix(w, "-") {
				w = filepath.Join("..", w)
			}
			flags = append(flags, w)
		}
	}
	return flags, addr
}

// quickShell runs the README's commands against a serve: the shell
// variables and placeholders they use, the CLI from the repository root,
// curl as Go HTTP requests.
type quickShell struct {
	p       *serveProc
	base    string // the address the README's URLs name
	token   string // $TOKEN, once exported
	eventID string // what <event_id> stands for
}

func (s *quickShell) export(t *testing.T, cmd []string) {
	t.Helper()
	if len(cmd) != 3 || cmd[0] != "export" || cmd[1] != "TOKEN=$(cat data/dev-token)" || cmd[2] != "API="+s.base {
		t.Fatalf("README quickstart: want `export TOKEN=$(cat data/dev-token) API=%s`, got %q", s.base, cmd)
	}
	// make run keeps its data in ./data; this serve in p.data.
	tok, err := os.ReadFile(filepath.Join(s.p.data, "dev-token"))
	if err != nil {
		t.Fatalf("the development token the README reads: %v", err)
	}
	s.token = strings.TrimSpace(string(tok))
}

func (s *quickShell) expand(w string) string {
	w = strings.ReplaceAll(w, "$TOKEN", s.token)
	w = strings.ReplaceAll(w, "$API", s.base)
	return strings.ReplaceAll(w, "<event_id>", s.eventID)
}

// cli runs `bin/countersign …` from the repository root, as the README does.
func (s *quickShell) cli(t *testing.T, cmd []string) string {
	t.Helper()
	if cmd[0] != "bin/countersign" {
		t.Fatalf("README quickstart: want a bin/countersign command, got %q", cmd)
	}
	args := make([]string, len(cmd)-1)
	for i, w := range cmd[1:] {
		args[i] = s.expand(w)
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(abs, args...)
	c.Dir = ".."
	c.Env = append(os.Environ(), "COUNTERSIGN_URL="+s.p.url, "COUNTERSIGN_TOKEN="+s.p.token)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", cmd, err, out)
	}
	return string(out)
}

type httpAnswer struct {
	status int
	body   []byte
	err    error
}

func (a httpAnswer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%d %s: %v", a.status, a.body, err)
	}
}

func (s *quickShell) curl(ctx context.Context, t *testing.T, cmd []string) httpAnswer {
	t.Helper()
	a := s.curlErr(ctx, cmd)
	if a.err != nil {
		t.Fatalf("%q: %v", cmd, a.err)
	}
	return a
}

// curlErr sends what a `curl` command of the README sends: its method,
// headers and body, to this serve instead of the README's address.
func (s *quickShell) curlErr(ctx context.Context, cmd []string) httpAnswer {
	fail := func(format string, a ...any) httpAnswer { return httpAnswer{err: fmt.Errorf(format, a...)} }
	if cmd[0] != "curl" {
		return fail("want a curl command, got %q", cmd)
	}
	method, url := "", ""
	var body []byte
	header := http.Header{}
	for i := 1; i < len(cmd); i++ {
		w := cmd[i]
		arg := func() string {
			i++
			if i < len(cmd) {
				return s.expand(cmd[i])
			}
			return ""
		}
		switch {
		case w == "-s":
		case w == "-H":
			k, v, ok := strings.Cut(arg(), ":")
			if !ok {
				return fail("curl -H without a colon in %q", cmd)
			}
			header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case w == "-X":
			method = arg()
		case w == "-d":
			body = []byte(arg())
			if method == "" {
				method = http.MethodPost
			}
		case strings.HasPrefix(s.expand(w), s.base+"/"):
			url = s.p.url + strings.TrimPrefix(s.expand(w), s.base)
		default:
			return fail("curl argument %q that this test does not know (URLs must start with %s)", w, s.base)
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	if url == "" {
		return fail("curl without a URL: %q", cmd)
	}
	if body != nil && !json.Valid(body) {
		return fail("the body of %q is not JSON", cmd)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return fail("%v", err)
	}
	req.Header = header
	if body != nil {
		// What curl -d sends.
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return httpAnswer{status: resp.StatusCode, body: data, err: err}
}

type reviewAnswerJSON struct {
	Results []map[string]any `json:"results"`
}

// matchShown checks an answer against the one the README shows: the same
// results, each with every field shown; "…" stands for any non-empty value.
func matchShown(t *testing.T, step string, shown, got reviewAnswerJSON) {
	t.Helper()
	if len(shown.Results) != len(got.Results) {
		t.Fatalf("%s: %d results, the README shows %d", step, len(got.Results), len(shown.Results))
	}
	for i, want := range shown.Results {
		for k, v := range want {
			g, ok := got.Results[i][k]
			if v == "…" {
				if !ok || g == "" {
					t.Errorf("%s: result %d has no %s (the README shows one)", step, i, k)
				}
				continue
			}
			if !jsonEqual(g, v) {
				t.Errorf("%s: result %d: %s is %v, the README shows %v", step, i, k, g, v)
			}
		}
	}
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

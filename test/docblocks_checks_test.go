package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/policy"
)

// docChecks are the kinds a `<!-- check: KIND -->` marker may name: what
// the block must be for the document to be right. TypeScript is not one:
// the Go tests compile no TypeScript, so a ts block is run by a test of
// contracts/typescript (<!-- run: contracts/typescript/test/… -->) or is
// not run.
func docChecks(t *testing.T) map[string]func(mdBlock) error {
	t.Helper()
	cli := &cliFlags{bin: binary}
	cfg := &configProbe{bin: binary, dir: t.TempDir()}
	return map[string]func(mdBlock) error{
		"policy":    checkPolicy,
		"config":    cfg.check,
		"directory": checkDirectory,
		"json":      func(b mdBlock) error { return checkJSON(b.text) },
		"go":        func(b mdBlock) error { return checkGo(b.text) },
		"cli":       cli.check,
		"yaml":      checkYAML,
	}
}

// checkYAML: the block is one YAML document.
func checkYAML(b mdBlock) error {
	var v any
	return yaml.Unmarshal([]byte(b.text), &v)
}

// checkPolicy: the block parses as a policy (policy.Parse, every CEL
// condition compiled). A fragment is completed as little as it takes: a
// list of rules goes under rules:, and a mapping without version or
// default gets version "docs" and default require_approval.
func checkPolicy(b mdBlock) error {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(b.text), &root); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return errors.New("empty")
	}
	src, how := b.text, "as written"
	switch doc := root.Content[0]; doc.Kind {
	case yaml.SequenceNode:
		src, how = "version: \"docs\"\ndefault: require_approval\nrules:\n"+b.text, "as the rules of a policy"
	case yaml.MappingNode:
		var prefix []string
		for _, key := range []string{"version: \"docs\"", "default: require_approval"} {
			if !hasKey(doc, strings.Split(key, ":")[0]) {
				prefix = append(prefix, key)
			}
		}
		if len(prefix) > 0 {
			src, how = strings.Join(prefix, "\n")+"\n"+b.text, "with "+strings.Join(prefix, ", ")
		}
	default:
		return errors.New("neither a policy nor a list of rules")
	}
	if _, err := policy.Parse([]byte(src)); err != nil {
		return fmt.Errorf("not a valid policy (%s): %w", how, err)
	}
	return nil
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// checkDirectory: the block parses as an approver directory
// (directory.Parse, strict).
func checkDirectory(b mdBlock) error {
	_, err := directory.Parse([]byte(b.text))
	return err
}

// checkJSON: the block is JSON, or JSON values one after another (JSON
// Lines), with no object holding a key twice.
func checkJSON(text string) error {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	n := 0
	for {
		err := jsonValue(dec)
		if errors.Is(err, io.EOF) && n > 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		n++
	}
}

// jsonValue reads one value, failing on a duplicate key.
func jsonValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return err
			}
			k := key.(string)
			if seen[k] {
				return fmt.Errorf("the key %q twice in one object", k)
			}
			seen[k] = true
			if err := jsonValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if err := jsonValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}

// checkGo: the block parses as a Go file, as declarations, or as the
// statements of a function body (go/parser).
func checkGo(text string) error {
	var err error
	for _, src := range []string{text, "package doc\n" + text, "package doc\nfunc _() {\n" + text + "\n}\n"} {
		if _, err = parser.ParseFile(token.NewFileSet(), "doc.go", src, parser.AllErrors); err == nil {
			return nil
		}
	}
	return fmt.Errorf("not Go (as a file, as declarations, or as statements): %w", err)
}

// configProbe checks a countersign.yaml with serve's own reader and
// validation: serve --config FILE with an invalid --log-format reads and
// validates the file, then stops at the flag before it starts anything.
type configProbe struct {
	bin, dir string
	once     sync.Once
	selfErr  error
	n        int
	mu       sync.Mutex
}

const configProbeStop = "--log-format must be json or text"

func (c *configProbe) run(text string) (string, error) {
	c.mu.Lock()
	c.n++
	file := filepath.Join(c.dir, fmt.Sprintf("countersign-%d.yaml", c.n))
	c.mu.Unlock()
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command(c.bin, "serve", "--config", file, "--log-format", "none")
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), errors.New("serve started")
	}
	return string(out), nil
}

// check: the probe first shows that it reaches the reader (a key serve
// does not know is refused), then reads the block.
func (c *configProbe) check(b mdBlock) error {
	c.once.Do(func() {
		out, err := c.run("addr: 127.0.0.1:8080\nno_such_key: 1\n")
		if err != nil || strings.Contains(out, configProbeStop) || !strings.Contains(out, "no_such_key") {
			c.selfErr = fmt.Errorf("serve --config did not refuse an unknown key; the probe no longer reaches serve's reader: %v\n%s", err, out)
		}
	})
	if c.selfErr != nil {
		return c.selfErr
	}
	out, err := c.run(b.text)
	if err != nil {
		return err
	}
	if !strings.Contains(out, configProbeStop) {
		return fmt.Errorf("serve does not accept it as countersign.yaml:\n%s", strings.TrimSpace(out))
	}
	return nil
}

// cliFlags checks the countersign command lines of a block against the
// CLI's real flag sets, as its --help lists them.
type cliFlags struct {
	bin   string
	once  sync.Once
	err   error
	paths []string                   // "approvals approve", longest first
	flags map[string]map[string]bool // path → flag → takes a value
}

var (
	overviewLine = regexp.MustCompile(`(?m)^  countersign ((?:[a-z]+ ?)+)`)
	// A value flag names its value after a space; a bool flag does not.
	defaultsFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)( \S+)?`)
)

// load reads the commands from the overview and each one's flags from its
// --help.
func (c *cliFlags) load() {
	out, _ := exec.Command(c.bin, "--help").CombinedOutput()
	c.flags = map[string]map[string]bool{}
	for _, m := range overviewLine.FindAllStringSubmatch(string(out), -1) {
		path := strings.TrimSpace(m[1])
		if c.flags[path] != nil {
			continue
		}
		help, _ := exec.Command(c.bin, append(strings.Fields(path), "--help")...).CombinedOutput()
		if !bytes.HasPrefix(help, []byte("Usage: countersign "+path)) {
			c.err = fmt.Errorf("countersign %s --help printed no usage:\n%s", path, help)
			return
		}
		c.flags[path] = map[string]bool{"help": false, "h": false}
		for _, f := range defaultsFlag.FindAllStringSubmatch(string(help), -1) {
			c.flags[path][f[1]] = f[2] != ""
		}
		c.paths = append(c.paths, path)
	}
	if len(c.paths) < 20 {
		c.err = fmt.Errorf("countersign --help lists only %d commands: %q", len(c.paths), c.paths)
	}
	// The longest path first, so approvals approve wins over a shorter one.
	for i := range c.paths {
		for j := i + 1; j < len(c.paths); j++ {
			if len(strings.Fields(c.paths[j])) > len(strings.Fields(c.paths[i])) {
				c.paths[i], c.paths[j] = c.paths[j], c.paths[i]
			}
		}
	}
}

// check: every countersign command of the block names a command of the
// CLI and only flags that command defines; a flag that takes a value is
// given one.
func (c *cliFlags) check(b mdBlock) error {
	c.once.Do(c.load)
	if c.err != nil {
		return c.err
	}
	cmds, err := shellWords(b.text)
	if err != nil {
		return err
	}
	var errs []error
	n := 0
	for _, words := range cmds {
		args, ok := countersignArgs(words)
		if !ok {
			continue
		}
		n++
		if err := c.checkArgs(args); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", strings.Join(words, " "), err))
		}
	}
	if n == 0 {
		errs = append(errs, errors.New("no countersign command to check"))
	}
	return errors.Join(errs...)
}

// countersignArgs finds a countersign command among words (after VAR=value
// assignments and a shown prompt, $) and returns its arguments, up to a
// pipe, a list operator or a redirection.
func countersignArgs(words []string) ([]string, bool) {
	i := 0
	for i < len(words) && (words[i] == "$" || regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[i])) {
		i++
	}
	if i == len(words) || (words[i] != "countersign" && !strings.HasSuffix(words[i], "/countersign")) {
		return nil, false
	}
	args := words[i+1:]
	for j, w := range args {
		if w == "|" || w == "&&" || w == "||" || w == "&" || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") {
			return args[:j], true
		}
	}
	return args, true
}

// checkArgs checks one command's arguments against its flag set. Flags end
// at "--" (what follows is another program's, as with mcp).
func (c *cliFlags) checkArgs(args []string) error {
	path := ""
	for _, p := range c.paths {
		words := strings.Fields(p)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == p {
			path, args = p, args[len(words):]
			break
		}
	}
	if path == "" {
		return fmt.Errorf("no such command (see countersign --help)")
	}
	var errs []error
	for i := 0; i < len(args); i++ {
		w := args[i]
		if w == "--" {
			break
		}
		if len(w) < 2 || w[0] != '-' {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		takes, ok := c.flags[path][name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("countersign %s has no flag %s", path, w))
		case takes && !hasValue && i+1 == len(args):
			errs = append(errs, fmt.Errorf("countersign %s: %s takes a value", path, w))
		case takes && !hasValue:
			i++
		}
	}
	return errors.Join(errs...)
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTokenNewPrintsWhatTheCallersFileReads: the entry `token new` prints
// for a callers file is read by `mcp --callers` as it is printed, and the
// older spelling token_sha256 is read too.
func TestTokenNewPrintsWhatTheCallersFileReads(t *testing.T) {
	var out bytes.Buffer
	if err := cmdToken([]string{"new", "--subject", "carol", "--roles", "agent"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	i := strings.Index(text, "callers file")
	if i < 0 {
		t.Fatalf("token new prints no callers-file entry:\n%s", text)
	}
	entry := text[strings.Index(text[i:], "\n")+i+1:]
	entry = entry[:strings.Index(entry, "\n\n")+1]
	if lines := strings.Split(strings.TrimSpace(text), "\n"); !strings.HasPrefix(strings.TrimSpace(lines[len(lines)-3]), "- name: carol") {
		t.Errorf("the last three lines are not the directory entry (docs/quorum.md takes them with tail -3):\n%s", text)
	}
	hash := regexp.MustCompile(`sha256: ([0-9a-f]{64})`).FindStringSubmatch(entry)
	if hash == nil {
		t.Fatalf("no hash in the callers entry:\n%s", entry)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"printed.yaml": "callers:\n" + entry,
		"older.yaml":   "callers:\n  - id: carol\n    token_sha256: " + hash[1] + "\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		callers, err := readCallers(path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, body)
		}
		if callers[hash[1]] != "carol" {
			t.Errorf("%s: callers %v, want carol under %s", name, callers, hash[1])
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("callers:\n  - id: carol\n    sha256: "+hash[1]+"\n    token_sha256: "+strings.Repeat("0", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCallers(bad); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("two different hashes for one caller: %v, want a refusal", err)
	}
}

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// binary is the countersign binary, built once with the race detector.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-race", "-o", binary, "../../services/countersign")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building countersign:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runChaos starts the harness, runs it and fails the test with every
// violated invariant.
func runChaos(t *testing.T, cfg Config) {
	t.Helper()
	cfg.Binary = binary
	cfg.Dir = t.TempDir()
	cfg.Logf = t.Logf
	ctx := context.Background()
	h, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the harness: %v", err)
	}
	defer h.Close()
	t.Logf("cluster %s; %d role processes up", h.cluster.urls(), len(h.procs))
	res := h.Run(ctx)
	t.Logf("summary:\n%s", res.Summary)
	if len(res.Problems) > 0 {
		for _, p := range h.procs {
			t.Logf("%s log tail:\n%s", p.name, p.logTail(15))
		}
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("countersign-chaos-%d-%d", cfg.Seed, time.Now().Unix()))
		if err := os.MkdirAll(keep, 0o755); err == nil {
			for _, p := range h.procs {
				if data, err := os.ReadFile(filepath.Join(p.data, "serve.log")); err == nil {
					_ = os.WriteFile(filepath.Join(keep, p.name+".log"), data, 0o644)
				}
			}
			t.Logf("process logs kept in %s", keep)
		}
		t.Fatalf("%d invariant violations; by kind:\n%s\nall:\n%s", len(res.Problems), byKind(res.Problems), strings.Join(res.Problems, "\n"))
	}
}

// TestChaosShort is the short fault run of `make test`: 25 s of load with
// process kills and NATS node restarts on a fixed seed, then the one- and
// two-nodes-down checks, then the invariants.
func TestChaosShort(t *testing.T) {
	runChaos(t, Config{
		Seed:         20261123,
		Duration:     25 * time.Second,
		Agents:       4,
		FaultGapMin:  2 * time.Second,
		FaultGapMax:  4 * time.Second,
		QuorumChecks: true,
		Quiesce:      2 * time.Minute,
	})
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// byKind counts violations that differ only in their ids.
func byKind(problems []string) string {
	counts := map[string]int{}
	for _, p := range problems {
		first, _, _ := strings.Cut(p, "\n")
		counts[uuidRE.ReplaceAllString(first, "<id>")]++
	}
	var b strings.Builder
	for _, k := range sortedKeys(counts) {
		fmt.Fprintf(&b, "  %4d × %s\n", counts[k], k)
	}
	return b.String()
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/countersign/countersign/events/embedded"
)

// ServeMemoryConfig says how large a decided history to give a `countersign
// serve` process and which of its roles to measure on it.
type ServeMemoryConfig struct {
	// Binary is the countersign executable run as `serve`.
	Binary string
	// Dir is the parent of the data directory (a temporary directory if
	// empty); the data directory is removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Reuse is a directory a run with Keep left: its history is measured
	// again, without seeding (Decided is then only reported), unless
	// SeedMore.
	Reuse string
	// SeedMore, with Reuse, first decides Decided more approvals on the
	// reused history (serve on its store as it runs, with SeedSync), and
	// reports their rate and serve's CPU per approval: the cost of a
	// decision on a long history.
	SeedMore bool
	// Decided is how many approvals are requested and decided.
	Decided int
	// Claim makes the agent claim each approved call, as a runtime does
	// before it runs it (the full cycle).
	Claim bool
	// Roles are the role sets started on the decided history, each alone
	// after the others stopped ("" is every role).
	Roles []string
	// Settle is how long after ready the resident memory is read a second
	// time (default 10 s).
	Settle time.Duration
	// SeedSync is the embedded store's sync mode while the history is
	// written (serve's --sync; "" is serve's default, always). The store
	// holds the same messages either way; lazy writes them sooner. Every
	// restart runs with serve's default.
	SeedSync string
	// Out receives progress and the table.
	Out io.Writer
}

// ServeMemoryReport is the resident memory of serve on a decided history.
type ServeMemoryReport struct {
	Decided     int     `json:"decided"`
	Claimed     bool    `json:"claimed"`
	SeedSeconds float64 `json:"seed_seconds"`
	// SeedCPUSeconds is serve's CPU time (user and system) while it decided
	// the approvals of a SeedMore run (0 otherwise).
	SeedCPUSeconds float64 `json:"seed_cpu_seconds,omitempty"`
	// StoreBytes is the size of the JetStream store on disk after seeding.
	StoreBytes int64            `json:"store_bytes"`
	Rows       []ServeMemoryRow `json:"rows"`
}

// ServeMemoryRow is one start of serve.
type ServeMemoryRow struct {
	// Phase is fresh (an empty store), seeded (the process that wrote the
	// history, after writing it) or restarted (a new process on the store).
	Phase string `json:"phase"`
	Roles string `json:"roles"`
	// ReadySeconds is the start until /readyz answers 200.
	ReadySeconds float64 `json:"ready_seconds"`
	// RSSReady is VmRSS once ready; RSSSettled after Settle more.
	RSSReady   uint64 `json:"rss_ready_bytes"`
	RSSSettled uint64 `json:"rss_settled_bytes"`
	// HeapInuse is the Go heap in use (go_memstats_heap_inuse_bytes) when
	// settled.
	HeapInuse uint64 `json:"heap_inuse_bytes"`
}

// ServeMemory starts serve on an empty store, decides cfg.Decided approvals
// through its HTTP API, then restarts it with each role set and reads its
// resident memory from /proc.
func ServeMemory(ctx context.Context, cfg ServeMemoryConfig) (*ServeMemoryReport, error) {
	if cfg.Binary == "" || cfg.Decided < 1 {
		return nil, fmt.Errorf("bench: serve memory: ServeMemoryConfig needs Binary and Decided ≥ 1")
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Settle == 0 {
		cfg.Settle = 10 * time.Second
	}
	if len(cfg.Roles) == 0 {
		cfg.Roles = []string{""}
	}
	rep := &ServeMemoryReport{Decided: cfg.Decided, Claimed: cfg.Claim}
	dir := cfg.Reuse
	if dir != "" && cfg.SeedMore {
		if err := seedMore(ctx, cfg, dir, rep); err != nil {
			return rep, err
		}
	}
	if dir == "" {
		d, err := seededServe(ctx, cfg, rep)
		if d != "" && !cfg.Keep {
			defer os.RemoveAll(d)
		}
		if err != nil {
			return rep, err
		}
		dir = d
	}
	rep.StoreBytes = dirSize(filepath.Join(dir, "data", "jetstream"))
	for _, roles := range cfg.Roles {
		p, row, err := startServe(ctx, cfg, dir, "restarted", roles)
		if err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, row)
		if err := p.stop(); err != nil {
			return rep, err
		}
	}
	printServeMemory(cfg.Out, rep)
	return rep, nil
}

// seedMore starts serve on the reused store dir and has it decide
// cfg.Decided more approvals, reading its CPU time before and after.
func seedMore(ctx context.Context, cfg ServeMemoryConfig, dir string, rep *ServeMemoryReport) error {
	p, row, err := startServe(ctx, cfg, dir, "fresh", "")
	if err != nil {
		return err
	}
	row.Phase = "reused"
	rep.Rows = append(rep.Rows, row)
	p.runPrefix = strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	before, err := p.cpuSeconds()
	if err == nil {
		err = seedServe(ctx, cfg, p, rep)
	}
	if err == nil {
		var after float64
		after, err = p.cpuSeconds()
		rep.SeedCPUSeconds = after - before
	}
	if serr := p.stop(); err == nil {
		err = serr
	}
	return err
}

// seededServe makes a data directory under cfg.Dir and has serve decide
// cfg.Decided approvals in it.
func seededServe(ctx context.Context, cfg ServeMemoryConfig, rep *ServeMemoryReport) (string, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "countersign-serve-memory-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "countersign.yaml"), []byte(serveMemoryYAML), 0o600); err != nil {
		return dir, err
	}
	p, row, err := startServe(ctx, cfg, dir, "fresh", "")
	if err != nil {
		return dir, err
	}
	rep.Rows = append(rep.Rows, row)
	err = seedServe(ctx, cfg, p, rep)
	if err == nil {
		rep.Rows = append(rep.Rows, p.measure(ctx, cfg, "seeded", "", 0))
	}
	if serr := p.stop(); err == nil {
		err = serr
	}
	return dir, err
}

// serveMemoryYAML turns the principal's budgets off: one token writes the
// whole history as fast as the server takes it.
const serveMemoryYAML = `budgets:
  review_rate: -1
  vote_rate: -1
  pending_per_agent: -1
  pending_per_tenant: -1
`

// serveProc is a running `countersign serve`.
type serveProc struct {
	// runPrefix starts the run ids the seeding writes: a reused history
	// already holds the calls of "run-0", "run-1", ...
	runPrefix string
	cmd       *exec.Cmd
	base      string
	token     string
	done      chan error
}

// startServe starts serve on dir's data with roles, waits until it is
// ready and measures it.
func startServe(ctx context.Context, cfg ServeMemoryConfig, dir, phase, roles string) (*serveProc, ServeMemoryRow, error) {
	port, err := embedded.FreePort()
	if err != nil {
		return nil, ServeMemoryRow{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", "--config", filepath.Join(dir, "countersign.yaml"), "--data", filepath.Join(dir, "data"),
		"--addr", addr, "--nats-listen", "off", "--log-level", "warn"}
	if roles != "" {
		args = append(args, "--roles", roles)
	}
	if phase == "fresh" && cfg.SeedSync != "" {
		args = append(args, "--sync", cfg.SeedSync)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, ServeMemoryRow{}, err
	}
	defer logFile.Close()
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, ServeMemoryRow{}, err
	}
	p := &serveProc{cmd: cmd, base: "http://" + addr, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	if err := p.awaitReady(ctx, dir); err != nil {
		_ = p.stop()
		return nil, ServeMemoryRow{}, fmt.Errorf("serve %s (roles %q): %w; its log: %s", phase, roles, err, filepath.Join(dir, "serve.log"))
	}
	token, err := os.ReadFile(filepath.Join(dir, "data", "dev-token"))
	if err != nil {
		_ = p.stop()
		return nil, ServeMemoryRow{}, err
	}
	p.token = strings.TrimSpace(string(token))
	return p, p.measure(ctx, cfg, phase, roles, time.Since(start)), nil
}

// awaitReady polls /readyz until it answers 200 (a process of its own has
// no other signal for it), bounded by two minutes.
func (p *serveProc) awaitReady(ctx context.Context, dir string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if res, err := httpClient.Get(p.base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("exited before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not 200 within 2 minutes")
		}
	}
}

// measure reads the process's resident memory now and after cfg.Settle.
func (p *serveProc) measure(ctx context.Context, cfg ServeMemoryConfig, phase, roles string, ready time.Duration) ServeMemoryRow {
	row := ServeMemoryRow{Phase: phase, Roles: roles, ReadySeconds: ready.Seconds(), RSSReady: p.rss()}
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Settle):
	}
	row.RSSSettled = p.rss()
	row.HeapInuse = p.heapInuse()
	if roles == "" {
		row.Roles = "arbiter,api,notifier"
	}
	return row
}

// rss is the process's VmRSS in bytes (0 where /proc cannot tell).
func (p *serveProc) rss() uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heapInuse reads go_memstats_heap_inuse_bytes from /metrics (loopback
// needs no token); 0 when it cannot.
func (p *serveProc) heapInuse() uint64 {
	v, _ := p.metric("go_memstats_heap_inuse_bytes")
	return uint64(v)
}

// cpuSeconds is the process's user and system CPU time, as its /metrics
// says (process_cpu_seconds_total).
func (p *serveProc) cpuSeconds() (float64, error) {
	return p.metric("process_cpu_seconds_total")
}

// metric reads one unlabelled sample from serve's /metrics.
func (p *serveProc) metric(name string) (float64, error) {
	res, err := httpClient.Get(p.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("bench: serve's /metrics has no %s", name)
}

// stop ends serve with SIGTERM, as a service manager does, and waits for
// it to exit.
func (p *serveProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("serve did not stop within a minute of SIGTERM")
	}
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func printServeMemory(w io.Writer, rep *ServeMemoryReport) {
	fmt.Fprintf(w, "\nserve's resident memory, %d decided approvals (claimed: %t), seeded in %.1fs, %.0f MB stored\n",
		rep.Decided, rep.Claimed, rep.SeedSeconds, float64(rep.StoreBytes)/1e6)
	if rep.SeedCPUSeconds > 0 && rep.SeedSeconds > 0 {
		fmt.Fprintf(w, "  decided on the reused history: %.0f approvals/s, serve's CPU %.2f ms per approval\n",
			float64(rep.Decided)/rep.SeedSeconds, 1000*rep.SeedCPUSeconds/float64(rep.Decided))
	}
	fmt.Fprintf(w, "  %-10s %-22s %8s %12s %12s %12s\n", "phase", "roles", "ready", "RSS ready", "RSS settled", "Go heap")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "  %-10s %-22s %7.2fs %8.1f MiB %8.1f MiB %8.1f MiB\n", r.Phase, r.Roles, r.ReadySeconds,
			mib(r.RSSReady), mib(r.RSSSettled), mib(r.HeapInuse))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

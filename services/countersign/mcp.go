package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	csclient "github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/services/mcpgateway"
)

const mcpAbout = `Stdio: countersign mcp --name NAME [flags] -- COMMAND [ARGS...]
  launches COMMAND as the MCP server and serves its tools, resources and
  prompts on stdin/stdout; paste it into an MCP client's config in place of
  the server. Streamable HTTP: countersign mcp --listen ADDR --callers FILE
  --upstream NAME=URL [--upstream ...] serves each upstream at /mcp/NAME;
  an upstream that cannot be reached is logged, tried again and served once
  it answers, the others meanwhile as usual (GET /metrics, with a caller's
  token: countersign_mcp_upstream_up).
  Every tools/call is reviewed as NAME.TOOL with its arguments and the tool's
  annotations as labels (mcp.destructiveHint, mcp.readOnlyHint, ...).
  --receipts (or --receipts-for NAME) forwards each call's receipt to
  upstreams that verify them, and refuses calls that have none.
  Countersign is found through --url/--token, COUNTERSIGN_URL and
  COUNTERSIGN_TOKEN, or the local serve's ./data, as for the other commands.
  Logs go to stderr; see docs/mcp.md.
`

// mcpGCPercent is the GOGC of `countersign mcp` unless GOGC is set.
const mcpGCPercent = 1000

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// cmdMCP runs `countersign mcp` (see mcpAbout).
func cmdMCP(args []string, stdout, stderr io.Writer) error {
	f, err := parseMCPFlags(args, stdout)
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		// The MCP SDK's decoder allocates 32 KiB for every message it
		// decodes, several per call: at Go's default the gateway collects
		// garbage every few calls, on the path of the calls. Its live heap
		// is small; a heap ten times that size keeps collections rare.
		debug.SetGCPercent(mcpGCPercent)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("mcp: --log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	base, url, err := f.gatewayConfig(log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch {
	case f.http.listen == "" && len(f.command) == 0:
		return errors.New("mcp: give the server to wrap after --, or --listen with --upstream (see 'countersign mcp --help')")
	case f.http.listen != "" && len(f.command) > 0:
		return errors.New("mcp: either a command to wrap (stdio) or --listen (HTTP), not both")
	case f.http.listen == "":
		if f.name == "" {
			return errors.New("mcp: --name is required: tools are reviewed as NAME.TOOL")
		}
		if len(f.http.receiptsFor) > 0 {
			return errors.New("mcp: --receipts-for names HTTP upstreams; on stdio use --receipts")
		}
		cfg := base
		cfg.Name, cfg.Receipts = f.name, f.http.receipts
		cfg.RunID = firstNonEmpty(f.runID, defaultRunID(f.name))
		return mcpStdio(ctx, cfg, f.command, stderr, log, url)
	}
	return mcpListen(ctx, base, f.http, stdout, log)
}

// mcpFlags are the flags and arguments of `countersign mcp`.
type mcpFlags struct {
	conn                            func() (*client, error)
	name, agent, runID, requestedBy string
	tenant, logLevel                string
	labels                          listFlag
	maxWait, inputWait, progress    time.Duration
	maxArgs                         int
	// http are the flags of --listen; its receipts applies on stdio too.
	http mcpListenFlags
	// command is the server to wrap on stdio, given after the flags.
	command []string
}

// parseMCPFlags parses the arguments of `countersign mcp`.
func parseMCPFlags(args []string, stdout io.Writer) (*mcpFlags, error) {
	fs := newFlagSet("mcp", stdout)
	f := &mcpFlags{conn: clientFlags(fs.FlagSet)}
	fs.StringVar(&f.name, "name", "", "stdio: the server's name; its tools are reviewed as NAME.TOOL")
	fs.StringVar(&f.http.listen, "listen", "", "HTTP: serve Streamable HTTP on this address (e.g. 127.0.0.1:8090)")
	fs.Var(&f.http.upstreams, "upstream", "HTTP: NAME=URL of an upstream Streamable HTTP server (repeatable)")
	fs.StringVar(&f.http.callersFile, "callers", "", "HTTP: YAML file of callers: [{id, sha256}] ('countersign token new' prints hashes)")
	fs.StringVar(&f.agent, "agent", mcpgateway.DefaultAgent, "agent name of the reviews")
	fs.StringVar(&f.runID, "run-id", "", "stdio: run identity, stable across restarts (default mcp:USER@HOST:NAME)")
	fs.StringVar(&f.requestedBy, "requested-by", os.Getenv("COUNTERSIGN_REQUESTED_BY"), "stdio: the person the calls are made for (default $COUNTERSIGN_REQUESTED_BY)")
	fs.StringVar(&f.tenant, "tenant", "", "the runs' tenant")
	fs.Var(&f.labels, "label", "KEY=VALUE run label for the policy (repeatable)")
	fs.DurationVar(&f.maxWait, "max-wait", mcpgateway.DefaultMaxWait, "how long a call waits for a human before answering that it awaits approval")
	fs.DurationVar(&f.inputWait, "input-wait", mcpgateway.DefaultInputWait, "how long an upstream's question sent to the client (elicitation by round trip) waits for its answer before it is cancelled")
	fs.DurationVar(&f.progress, "progress-every", mcpgateway.DefaultProgressEvery, "interval of progress notifications while a call waits")
	fs.IntVar(&f.maxArgs, "max-arguments", mcpgateway.DefaultMaxArguments, "largest arguments of a call, in bytes")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error (logs go to stderr)")
	fs.BoolVar(&f.http.receipts, "receipts", false, "the upstream (every upstream) wants receipts: each call carries its receipt in _meta[\"countersign/receipt\"]; calls without one are refused")
	fs.Var(&f.http.receiptsFor, "receipts-for", "HTTP: NAME of an upstream that wants receipts, as --receipts for that one (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.command = fs.Args()
	return f, nil
}

// gatewayConfig is the configuration every gateway of f starts from, and
// the URL of the Countersign API it reviews calls with.
func (f *mcpFlags) gatewayConfig(log *slog.Logger) (mcpgateway.Config, string, error) {
	lbl := map[string]string{}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return mcpgateway.Config{}, "", fmt.Errorf("mcp: --label %q: want KEY=VALUE", kv)
		}
		lbl[k] = v
	}
	c, err := f.conn()
	if err != nil {
		return mcpgateway.Config{}, "", fmt.Errorf("mcp: %w", err)
	}
	cs, err := csclient.New(csclient.Config{URL: c.url, Token: c.token})
	if err != nil {
		return mcpgateway.Config{}, "", fmt.Errorf("mcp: %w", err)
	}
	base := mcpgateway.Config{Countersign: cs, Agent: f.agent, RequestedBy: f.requestedBy, Tenant: f.tenant, Labels: lbl,
		MaxWait: f.maxWait, InputWait: f.inputWait, ProgressEvery: f.progress, MaxArguments: f.maxArgs, Logger: log}
	// A client that cancels a call (notifications/cancelled) cancels the
	// approval it opened, as the agent that submitted it.
	base.Cancel = cs.Cancel
	return base, c.url, nil
}

// mcpStdio runs the gateway of cfg on stdio, in front of the server that
// command starts.
func mcpStdio(ctx context.Context, cfg mcpgateway.Config, command []string, stderr io.Writer, log *slog.Logger, url string) error {
	cfg.Dial = func(ctx context.Context, mc *mcp.Client) (*mcp.ClientSession, error) {
		cmd := exec.Command(command[0], command[1:]...)
		cmd.Stderr = stderr
		return mc.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	}
	g, err := mcpgateway.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	defer g.Close()
	log.Info("mcp gateway on stdio", slog.String("server", cfg.Name), slog.String("countersign", url), slog.String("run_id", cfg.RunID))
	if err := g.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// mcpListenFlags are the flags of `countersign mcp --listen`.
type mcpListenFlags struct {
	listen, callersFile    string
	upstreams, receiptsFor listFlag
	receipts               bool
}

// mcpListen serves Streamable HTTP on f.listen, one gateway (from base) per
// upstream.
func mcpListen(ctx context.Context, base mcpgateway.Config, f mcpListenFlags, stdout io.Writer, log *slog.Logger) error {
	upstreams := f.upstreams
	if len(upstreams) == 0 {
		return errors.New("mcp: --listen needs at least one --upstream NAME=URL")
	}
	if f.callersFile == "" {
		return errors.New("mcp: --listen needs --callers: every HTTP caller is authenticated, to name who requested a call")
	}
	callers, err := readCallers(f.callersFile)
	if err != nil {
		return fmt.Errorf("mcp: --callers: %w", err)
	}
	var gws []*mcpgateway.Gateway
	wants := map[string]bool{}
	for _, n := range f.receiptsFor {
		wants[n] = true
	}
	for _, u := range upstreams {
		n, url, ok := strings.Cut(u, "=")
		if !ok || n == "" || url == "" {
			return fmt.Errorf("mcp: --upstream %q: want NAME=URL", u)
		}
		cfg := base
		cfg.Name, cfg.RunID = n, "mcp:"+n
		cfg.Receipts = f.receipts || wants[n]
		delete(wants, n)
		cfg.Dial = func(ctx context.Context, mc *mcp.Client) (*mcp.ClientSession, error) {
			return mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
		}
		// One upstream that cannot be reached does not keep the others
		// from being served: its clients are told, and the gateway keeps
		// trying to reach it.
		cfg.ConnectLater = true
		g, err := mcpgateway.New(ctx, cfg)
		if err != nil {
			return fmt.Errorf("mcp: upstream %s: %w", n, err)
		}
		defer g.Close()
		gws = append(gws, g)
	}
	for n := range wants {
		return fmt.Errorf("mcp: --receipts-for %q: no --upstream has that name", n)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	srv := &http.Server{Handler: mcpgateway.Handler(gws, callers), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	var down []string
	for _, g := range gws {
		if !g.Health().Up {
			down = append(down, g.Name())
		}
	}
	if len(down) > 0 {
		log.Warn("serving without the upstreams that cannot be reached; trying them again", slog.String("unreachable", strings.Join(down, ",")))
	}
	fmt.Fprintf(stdout, "MCP gateway: http://%s/mcp/NAME for %s\n", ln.Addr(), strings.Join(upstreams, ", "))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// defaultRunID is the run identity of a stdio gateway: stable across its
// restarts, distinct per user, machine and server name.
func defaultRunID(name string) string {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return "mcp:" + who + "@" + host + ":" + name
}

// readCallers reads a callers file: callers: [{id: carol, sha256: HEX}],
// the hash spelled as in the tokens of countersign.yaml (token_sha256 is
// read too).
func readCallers(path string) (mcpgateway.Callers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Callers []struct {
			ID          string `yaml:"id"`
			SHA256      string `yaml:"sha256"`
			TokenSHA256 string `yaml:"token_sha256"`
		} `yaml:"callers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := mcpgateway.Callers{}
	for i, c := range f.Callers {
		h := strings.ToLower(c.SHA256)
		if c.TokenSHA256 != "" {
			if h != "" && h != strings.ToLower(c.TokenSHA256) {
				return nil, fmt.Errorf("%s: callers[%d]: sha256 and token_sha256 differ; give one", path, i)
			}
			h = strings.ToLower(c.TokenSHA256)
		}
		if c.ID == "" || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%s: callers[%d]: needs an id and a sha256 of 64 hex digits (what `countersign token new` prints)", path, i)
		}
		out[h] = c.ID
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no callers", path)
	}
	return out, nil
}

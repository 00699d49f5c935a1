package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier/auditsink"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/api"
)

// Files serve keeps under the data directory.
const (
	fileDevToken  = "dev-token"
	fileNATSUsers = "nats-users.json"
	fileResolver  = "resolver.json"
	fileServe     = "serve.json"
	dirJetStream  = "jetstream"
)

// serveInfo is written to <data>/serve.json so the CLI on the same machine
// finds the API without flags.
type serveInfo struct {
	URL     string `json:"url"`
	NATSURL string `json:"nats_url,omitempty"`
	PID     int    `json:"pid"`
}

func cmdServe(args []string, out io.Writer) error {
	fs := newFlagSet("serve", out)
	configPath := fs.String("config", "", "configuration file (countersign.yaml)")
	addr := fs.String("addr", "", "HTTP listen address for the API and the inbox (default 127.0.0.1:8080)")
	data := fs.String("data", "", "data directory (default ./data)")
	natsURL := fs.String("nats-url", "", "external NATS server URL; empty runs the embedded server")
	natsListen := fs.String("nats-listen", "", `embedded NATS client address (default 127.0.0.1:4222; "off" for none)`)
	syncMode := fs.String("sync", "", "embedded JetStream sync: always (fsync every write, default) or lazy")
	provision := fs.String("provision", "", "create or update streams and buckets at start: auto (only with the embedded server), true or false")
	policyPath := fs.String("policy", "", "policy file (YAML); default: every tool call requires approval")
	directoryPath := fs.String("directory", "", "approver directory file (YAML): users, groups, token hashes; reloaded when it changes and on SIGHUP")
	roles := fs.String("roles", "", "comma-separated roles to run: arbiter,api,notifier (default all)")
	publicURL := fs.String("public-url", "", "URL approvers reach this server at, for links in Slack and email (default http://ADDR)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json (one object a line, for collectors) or text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fc, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	cfg := serveConfig{fileConfig: fc}
	override := func(dst *string, flagVal, env string) {
		if v := os.Getenv(env); v != "" && env != "" {
			*dst = v
		}
		if flagVal != "" {
			*dst = flagVal
		}
	}
	override(&cfg.Addr, *addr, "COUNTERSIGN_ADDR")
	override(&cfg.Data, *data, "COUNTERSIGN_DATA")
	override(&cfg.NATS.URL, *natsURL, "COUNTERSIGN_NATS_URL")
	override(&cfg.NATS.User, "", "COUNTERSIGN_NATS_USER")
	override(&cfg.NATS.Password, "", "COUNTERSIGN_NATS_PASSWORD")
	override(&cfg.NATS.CredsFile, "", "COUNTERSIGN_NATS_CREDS")
	override(&cfg.NATS.Listen, *natsListen, "")
	override(&cfg.NATS.Sync, *syncMode, "")
	override(&cfg.NATS.Provision, *provision, "COUNTERSIGN_PROVISION")
	override(&cfg.Policy, *policyPath, "")
	override(&cfg.Directory, *directoryPath, "COUNTERSIGN_DIRECTORY")
	override(&cfg.PublicURL, *publicURL, "COUNTERSIGN_PUBLIC_URL")
	override(&cfg.OIDC.Issuer, "", "COUNTERSIGN_OIDC_ISSUER")
	override(&cfg.OIDC.ClientID, "", "COUNTERSIGN_OIDC_CLIENT_ID")
	override(&cfg.OIDC.ClientSecret, "", "COUNTERSIGN_OIDC_CLIENT_SECRET")
	override(&cfg.OIDC.RedirectURL, "", "COUNTERSIGN_OIDC_REDIRECT_URL")
	if *roles != "" {
		cfg.Roles = strings.Split(*roles, ",")
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("serve: --log-level: %w", err)
	}
	var handler slog.Handler
	switch *logFormat {
	case "json":
		handler = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	case "text":
		handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	default:
		return fmt.Errorf("serve: --log-format must be json or text, got %q", *logFormat)
	}
	log := slog.New(handler)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopTracing, err := startTracing(ctx, cfg.OTel, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	return serve(ctx, cfg, log, os.Stdout)
}

// conns are the NATS connections of the roles this process runs.
type conns struct {
	admin, arbiter, api, notifier *nats.Conn
	// denied remembers the NATS permission violations seen, to name them
	// when a role fails.
	denied  *permLog
	all     []*nats.Conn
	natsURL string
	srv     *embedded.Server
	// restoreProcs puts back GOMAXPROCS when the embedded server synced
	// every write (embedded.RaiseProcsForSyncWrites).
	restoreProcs func()
}

// permLog keeps the last permission violations reported by the server and
// counts them by connection. A refusal while serving degrades the one
// request path that needed the subject (it answers 503 with a code); it
// never stops the process. At start-up, the violations seen explain why a
// role could not start.
type permLog struct {
	mu   sync.Mutex
	last []string
	// denied counts refusals by connection name (countersign-<role>).
	denied *prometheus.CounterVec
	// starting is true until every role has started; refused is closed
	// at the first refusal before then that is not a consumer deletion.
	starting    atomic.Bool
	refused     chan struct{}
	refusedOnce sync.Once
}

func newPermLog() *permLog {
	p := &permLog{refused: make(chan struct{})}
	p.starting.Store(true)
	p.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_nats_permission_denied_total",
		Help: "Operations the NATS server refused a Countersign connection, by connection. Deleting ordered consumers a role may not delete is refused by design and is counted too.",
	}, []string{"connection"})
	return p
}

func (p *permLog) add(conn string, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	p.denied.WithLabelValues(conn).Inc()
	p.mu.Lock()
	p.last = append(p.last, err.Error())
	if len(p.last) > 3 {
		p.last = p.last[len(p.last)-3:]
	}
	p.mu.Unlock()
	// Clients delete ordered consumers they are done with where their role
	// may not; the server expires those itself, so such refusals are benign.
	if p.starting.Load() && !strings.Contains(err.Error(), ".DELETE.") {
		p.refusedOnce.Do(func() { close(p.refused) })
	}
}

// started ends the start-up: from now on a refusal is counted and logged.
func (p *permLog) started() { p.starting.Store(false) }

// startTimeout bounds how long serve waits for its roles' consumers.
const startTimeout = 30 * time.Second

// awaitConsumers waits until every durable consumer of the roles this
// process runs exists, each looked up through its own role's connection.
// A permission the server refuses meanwhile means the NATS user cannot
// play its role: start-up fails then, at once, naming the refusal.
func awaitConsumers(ctx context.Context, list []events.Consumer, denied *permLog, roles []string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, c := range list {
		for {
			// Short lookups: a refused one gets no answer at all, and the
			// refusal must be seen at once.
			lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := c.JS.Consumer(lctx, c.Stream, c.Durable)
			cancel()
			if err == nil {
				break
			}
			select {
			case <-denied.refused:
				return fmt.Errorf("serve: roles %s cannot run as this NATS user", strings.Join(roles, ","))
			case <-ctx.Done():
				return fmt.Errorf("serve: consumer %s on %s was not created within %s: %w", c.Durable, c.Stream, startTimeout, ctx.Err())
			case <-tick.C:
			}
		}
	}
	return nil
}

// explain adds the permission violations seen to err: a role that the NATS
// user may not play fails naming what it was refused.
func (p *permLog) explain(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil || len(p.last) == 0 {
		return err
	}
	return fmt.Errorf("%w; the NATS server refused this user: %s (check the role's user and its permissions in deploy/README.md)",
		err, strings.Join(p.last, "; "))
}

func (c *conns) close() {
	for _, nc := range c.all {
		nc.Close()
	}
	if c.srv != nil {
		c.srv.Shutdown()
	}
	if c.restoreProcs != nil {
		c.restoreProcs()
	}
}

func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, out *os.File) (err error) {
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("serve: data directory: %w", err)
	}
	// One serve per data directory: the lock comes before anything is
	// written under it.
	unlock, err := lockDataDir(cfg.Data)
	if err != nil {
		return err
	}
	defer unlock()
	defer cfg.memory.apply(ctx, log)()
	pol, polSource, err := readPolicyFile(cfg.Policy)
	if err != nil {
		return err
	}
	cs, err := connect(cfg, log)
	if err != nil {
		return err
	}
	defer cs.close()
	// A failure the NATS server's permissions caused says which.
	defer func() { err = cs.denied.explain(err) }()

	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := provisionIfAsked(pctx, cfg, cs, log); err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	n := &node{cfg: cfg, log: log, cs: cs, pol: pol, polSource: polSource, runCtx: runCtx, errc: make(chan error, 4)}
	defer func() { cancelRun(); n.wg.Wait(); n.close() }()
	if err := n.prepare(pctx); err != nil {
		return err
	}
	// The backlog of the durable consumers this process runs, one
	// collector for all of them.
	var lagged []events.Consumer
	if cfg.has(roleNotifier) {
		c, err := n.startNotifier(pctx)
		if err != nil {
			return err
		}
		lagged = append(lagged, c...)
	}
	if cfg.has(roleArbiter) {
		c, err := n.startArbiter(pctx)
		if err != nil {
			return err
		}
		lagged = append(lagged, c...)
	}
	if len(lagged) > 0 {
		// Each consumer is read through its own role's connection: the
		// roles may describe only their own consumers.
		n.reg.MustRegister(events.NewLagCollector(lagged...))
		if err := awaitConsumers(pctx, lagged, cs.denied, cfg.Roles); err != nil {
			return err
		}
	}
	if cfg.has(roleAPI) {
		if err := n.startAPI(pctx, out); err != nil {
			return err
		}
	} else if err := n.startHealth(out); err != nil {
		return err
	}
	// Every role has started: a refusal from now on degrades the one
	// request path that met it (503 with a code), counted and logged.
	cs.denied.started()
	log.Info("serving", "roles", strings.Join(cfg.Roles, ","), "data", cfg.Data, "sync", cfg.NATS.Sync)

	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return nil
	case err := <-n.errc:
		return err
	}
}

// readPolicyFile reads and parses the policy file given to serve, or
// returns the built-in default (every call requires approval) without one.
func readPolicyFile(path string) (*policy.Policy, []byte, error) {
	if path == "" {
		return policy.Default(), nil, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: policy: %w", err)
	}
	p, err := policy.Parse(src)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: policy %s: %w", path, err)
	}
	return p, src, nil
}

// provisionIfAsked creates or updates the streams and buckets as admin when
// the configuration says so (by default only with the embedded server).
func provisionIfAsked(ctx context.Context, cfg serveConfig, cs *conns, log *slog.Logger) error {
	if !(cfg.NATS.Provision == "true" || (cfg.NATS.Provision == "auto" && cfg.NATS.URL == "")) {
		return nil
	}
	adminJS, err := jetstream.New(cs.admin)
	if err != nil {
		return err
	}
	replicas := cfg.NATS.Replicas
	if replicas == 0 {
		replicas = autoReplicas(cs.admin)
	}
	log.Info("provisioning streams and buckets", "replicas", replicas)
	if err := events.Provision(ctx, adminJS, events.ProvisionConfig{Replicas: replicas, Retention: cfg.retention}); err != nil {
		return fmt.Errorf("%w (provisioning needs the admin user; role users run with provision false)", err)
	}
	return nil
}

// serveHTTP serves hs on ln until ctx ends, then shuts the server down
// gracefully; a failure to serve goes to errc.
func serveHTTP(ctx context.Context, wg *sync.WaitGroup, errc chan<- error, ln net.Listener, hs *http.Server) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = hs.Shutdown(sctx)
	}()
}

// healthHandler serves /healthz (the process runs), /readyz (every NATS
// connection is up) and /metrics for roles that run without the API.
func healthHandler(cs *conns, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, nc := range cs.all {
			if !nc.IsConnected() {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"NATS is not connected"}}`))
				return
			}
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", metrics)
	return mux
}

// redactURLs hides the passwords of comma-separated NATS URLs.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// autoReplicas is 3 on a cluster of three or more servers (the servers the
// connection knows of, its own and those the cluster told it about), else 1.
func autoReplicas(nc *nats.Conn) int {
	if nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3 {
		return 3
	}
	return 1
}

func policyName(p string) string {
	if p == "" {
		return "built-in (every tool call requires approval)"
	}
	return p
}

// connect starts the embedded server (or dials the external one) and opens
// one connection per role, each as its own NATS user.
func connect(cfg serveConfig, log *slog.Logger) (*conns, error) {
	cs := &conns{denied: newPermLog()}
	opts := natsOptions(cs, log)
	if cfg.NATS.URL != "" {
		return connectExternal(cfg, cs, opts)
	}
	users, err := loadOrCreateUsers(filepath.Join(cfg.Data, fileNATSUsers))
	if err != nil {
		return nil, err
	}
	ec, err := embeddedConfig(cfg, users, log)
	if err != nil {
		return nil, err
	}
	if ec.SyncAlways {
		procs, raised, restore := embedded.RaiseProcsForSyncWrites()
		cs.restoreProcs = restore
		if raised {
			log.Info("the embedded store syncs every write: Go processors raised to cover threads blocked in syncs (set GOMAXPROCS to choose)",
				"gomaxprocs", procs, "cpus", runtime.NumCPU())
		} else {
			log.Info("Go processors as GOMAXPROCS sets them", "gomaxprocs", procs, "cpus", runtime.NumCPU())
		}
	}
	srv, err := embedded.Start(ec)
	if err != nil {
		cs.close()
		return nil, fmt.Errorf("serve: embedded NATS: %w%s", err, busyHint(err, "--nats-listen (or off)", "NATS=127.0.0.1:4223 or NATS=off"))
	}
	cs.srv = srv
	cs.natsURL = srv.ClientURL()
	if err := connectRoles(cs, users, opts); err != nil {
		cs.close()
		return nil, err
	}
	if cs.natsURL != "" {
		if err := writeResolver(cfg, cs.natsURL, roleUser(users, embedded.RoleResolver)); err != nil {
			cs.close()
			return nil, err
		}
	}
	return cs, nil
}

// natsOptions are every connection's options: reconnect for ever, and log
// asynchronous errors, noting permission denials in cs.denied.
func natsOptions(cs *conns, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			cs.denied.add(nc.Opts.Name, err)
			log.Warn("nats async error", "connection", nc.Opts.Name, "subject", subj, "err", err)
		}),
	}
}

// connectExternal dials the configured NATS once; every role shares the
// connection.
func connectExternal(cfg serveConfig, cs *conns, opts []nats.Option) (*conns, error) {
	o := append(opts, nats.Name("countersign"))
	if cfg.NATS.CredsFile != "" {
		o = append(o, nats.UserCredentials(cfg.NATS.CredsFile))
	} else if cfg.NATS.User != "" {
		o = append(o, nats.UserInfo(cfg.NATS.User, cfg.NATS.Password))
	}
	if p := externalInboxPrefix(cfg.NATS); p != "" {
		o = append(o, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(cfg.NATS.URL, o...)
	if err != nil {
		return nil, fmt.Errorf("serve: connect %s: %w", redactURLs(cfg.NATS.URL), err)
	}
	cs.admin, cs.arbiter, cs.api, cs.notifier = nc, nc, nc, nc
	cs.all = []*nats.Conn{nc}
	return cs, nil
}

// externalInboxPrefix is the inbox prefix of the connection to an external
// server (natsConfig.InboxPrefix): the configured one, else the role's when
// the user is a Countersign role's, else "" (the client's default).
func externalInboxPrefix(c natsConfig) string {
	if c.InboxPrefix != "" {
		return c.InboxPrefix
	}
	user := c.User
	if user == "" {
		first, _, _ := strings.Cut(c.URL, ",")
		if u, err := neturl.Parse(strings.TrimSpace(first)); err == nil && u.User != nil {
			user = u.User.Username()
		}
	}
	var o nats.Options
	_ = embedded.InboxOptionFor(user)(&o)
	return o.InboxPrefix
}

// embeddedConfig is the embedded server's configuration: its store under
// the data directory, the role users, and where it listens (nowhere when
// nats.listen is off or empty).
func embeddedConfig(cfg serveConfig, users []embedded.User, log *slog.Logger) (embedded.Config, error) {
	ec := embedded.Config{
		StoreDir:   filepath.Join(cfg.Data, dirJetStream),
		SyncAlways: cfg.NATS.Sync == "always",
		Users:      users,
		ServerName: "countersign",
		Logger:     log.With("role", "nats"),
	}
	// The audit sinks' durables are the notifier's alone, as the built-in
	// durables are their roles': the arbiter and the API, which read the
	// audit log, may neither re-filter nor acknowledge them.
	sinks, err := cfg.Audit.sinks()
	if err != nil {
		return ec, err
	}
	for _, sk := range sinks {
		ec.Durables = append(ec.Durables, embedded.Durable{Stream: audit.Stream, Name: auditsink.DurablePrefix + sk.Name, Owner: embedded.RoleNotifier})
	}
	if cfg.NATS.Listen == "off" || cfg.NATS.Listen == "" {
		ec.NoListen = true
		return ec, nil
	}
	host, port, err := net.SplitHostPort(cfg.NATS.Listen)
	if err != nil {
		return ec, fmt.Errorf("config: nats.listen: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return ec, fmt.Errorf("config: nats.listen: bad port %q", port)
	}
	if p == 0 {
		p = -1
	}
	ec.Host, ec.Port = host, p
	return ec, nil
}

// roleUser is the user of role r, or the zero user.
func roleUser(users []embedded.User, r embedded.Role) embedded.User {
	for _, u := range users {
		if u.Role == r {
			return u
		}
	}
	return embedded.User{}
}

// connectRoles opens one connection to the embedded server per role, as
// the role's user.
func connectRoles(cs *conns, users []embedded.User, opts []nats.Option) error {
	for _, x := range []struct {
		dst  **nats.Conn
		role embedded.Role
	}{{&cs.admin, embedded.RoleAdmin}, {&cs.arbiter, embedded.RoleArbiter}, {&cs.api, embedded.RoleAPI}, {&cs.notifier, embedded.RoleNotifier}} {
		nc, err := cs.srv.Connect(roleUser(users, x.role), append(opts, nats.Name("countersign-"+string(x.role)))...)
		if err != nil {
			return fmt.Errorf("serve: connect as %s: %w", x.role, err)
		}
		*x.dst = nc
		cs.all = append(cs.all, nc)
	}
	return nil
}

// writeResolver writes where and as whom trusted resolvers connect.
func writeResolver(cfg serveConfig, natsURL string, r embedded.User) error {
	return writeJSON(filepath.Join(cfg.Data, fileResolver), map[string]string{
		"url": natsURL, "user": r.Name, "password": r.Password, "inbox_prefix": embedded.InboxPrefix(embedded.RoleResolver),
		"note": "NATS user for trusted resolvers: may publish votes on hitl.approval.resolved.> (or ask them on hitl.approval.vote.>) and read hitl_approvals; cannot write records. Replies (requests, JetStream acks, reads) come only on inboxes under inbox_prefix: set it as the client's custom inbox prefix.",
	}, 0o600)
}

// loadOrCreateUsers keeps the embedded server's per-role users under the
// data directory, so restarts keep the same credentials.
func loadOrCreateUsers(path string) ([]embedded.User, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		var users []embedded.User
		if err := contracts.Decode(data, &users); err != nil {
			return nil, fmt.Errorf("serve: %s: %w", path, err)
		}
		return users, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	users := embedded.GenerateUsers(embedded.RoleAdmin, embedded.RoleArbiter, embedded.RoleOrchestrator,
		embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier)
	if err := writeJSON(path, users, 0o600); err != nil {
		return nil, err
	}
	return users, nil
}

// apiTokens returns the configured tokens, or a development token when none
// is configured: generated once, stored in <data>/dev-token with mode 0600.
// devToken is non-empty only when it was generated by this start.
func apiTokens(cfg serveConfig, log *slog.Logger) (tokens []api.Token, devToken string, err error) {
	if len(cfg.Tokens) > 0 {
		return cfg.Tokens, "", nil
	}
	path := filepath.Join(cfg.Data, fileDevToken)
	data, err := os.ReadFile(path)
	token := strings.TrimSpace(string(data))
	switch {
	case err == nil && token != "":
	case err == nil || errors.Is(err, os.ErrNotExist):
		t, _, err := api.NewToken()
		if err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
			return nil, "", fmt.Errorf("serve: write %s: %w", path, err)
		}
		token, devToken = t, t
		log.Info("generated a development token", "file", path)
	default:
		return nil, "", fmt.Errorf("serve: read %s: %w", path, err)
	}
	return []api.Token{{
		Name: "development", Subject: devSubject(), SHA256: api.HashToken(token),
		Roles: []string{api.RoleAgent, api.RoleApprover, api.RoleAdmin}, Development: true,
	}}, devToken, nil
}

// devSubject is the identity of the development token: the local user.
func devSubject() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "developer"
}

func writeJSON(path string, v any, mode os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// seedPolicy makes the policy file given to serve the fleet's live policy
// when none is stored yet. Once one is stored, the stored one wins (it may
// have been applied by another replica or by 'countersign policy apply'); a
// file that differs from it is reported, not applied, so a replica started
// with an old file cannot roll the fleet back.
func seedPolicy(ctx context.Context, js jetstream.JetStream, source []byte, file string, log *slog.Logger) error {
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return fmt.Errorf("serve: open the policy bucket: %w", err)
	}
	e, err := kv.Get(ctx, orchestrator.PolicyKey)
	var live orchestrator.PolicyDocument
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) ||
		err == nil && (json.Unmarshal(e.Value(), &live) != nil || live.Spec != orchestrator.SpecPolicyDocument):
		// None stored, or the key holds no policy (what the server
		// published there as the answer to someone's request before any
		// was applied): the apply replaces it.
		res, err := orchestrator.ApplyPolicy(ctx, js, source, "serve:"+file, time.Now())
		if errors.Is(err, orchestrator.ErrPolicyConflict) {
			return nil // another replica seeded it at the same moment
		}
		if err != nil {
			return fmt.Errorf("serve: store the policy %s: %w", file, err)
		}
		log.Info("policy stored as the fleet's live policy", "file", file, "version", res.Document.Version)
		return nil
	case err != nil:
		return fmt.Errorf("serve: read the live policy: %w", err)
	}
	if live.Source != string(source) {
		log.Warn("the live policy differs from the file given to serve; the live one stays in force (use 'countersign policy apply FILE' to change it)",
			"file", file, "live_version", live.Version, "applied_by", live.AppliedBy)
	}
	return nil
}

// busyHint says which flag moves a listener whose address is taken (and
// how with make run); "" for other errors.
func busyHint(err error, flag, makeVar string) string {
	if !errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use") {
		return ""
	}
	return fmt.Sprintf(" (another process has this address: choose another with %s; with make run, %s)", flag, makeVar)
}

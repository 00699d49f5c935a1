package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/audience"
	"github.com/countersign/countersign/notifier/auditsink"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/orchestrator/policy"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/arbiter"
	"github.com/countersign/countersign/services/inbox"
)

// node is what the roles of one serve process share: the configuration,
// the role connections, the metrics registry, the approver directory, the
// notification channels and the lifetime of the role loops. Each role has a
// start function; what a role opens is closed by close, in reverse order.
type node struct {
	cfg       serveConfig
	log       *slog.Logger
	cs        *conns
	pol       *policy.Policy // the policy file's, or the built-in default
	polSource []byte         // the policy file's text (nil without one)

	reg          *prometheus.Registry
	onDeadLetter func(stream, reason string)
	dirWatch     *directory.Watcher
	dir          directory.Source // stays a nil interface without a directory
	// dirChanged, once the API runs, publishes a reloaded directory at once.
	dirChanged atomic.Pointer[func()]
	who        people
	ln         net.Listener // the HTTP listener of the API
	url        string       // http:// address of ln
	publicURL  string       // where links in notifications point
	// passkeyOrigin is the inbox's origin passkeys are bound to ("": off).
	passkeyOrigin string
	parts         *notifierParts
	receipts      *receiptKeys

	// budgetRefusals counts what the budgets refused, the listener's
	// connections and the API's requests alike.
	budgetRefusals *prometheus.CounterVec

	runCtx  context.Context
	wg      sync.WaitGroup
	errc    chan error
	closers []func()
}

// close closes what the roles opened, last first.
func (n *node) close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
}

// run runs a role's loop until the process stops; an error ends serve.
func (n *node) run(role string, loop func(context.Context) error) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := loop(n.runCtx); err != nil {
			n.errc <- fmt.Errorf("%s: %w", role, err)
		}
	}()
}

// prepare sets up what several roles share: metrics, the directory, the
// API's listener (its address is in notification links) and the channels.
func (n *node) prepare(ctx context.Context) error {
	n.reg = prometheus.NewRegistry()
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	deadLetters := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_dead_letters_total", Help: "Messages copied to a dead-letter subject, by stream and reason.",
	}, []string{"stream", "reason"})
	n.budgetRefusals = api.NewBudgetRefusals()
	n.reg.MustRegister(deadLetters, n.cs.denied.denied, n.budgetRefusals)
	n.onDeadLetter = func(stream, reason string) { deadLetters.WithLabelValues(stream, reason).Inc() }

	cfg := n.cfg
	if cfg.Directory != "" && (cfg.has(roleAPI) || cfg.has(roleNotifier)) {
		w, err := directory.Watch(n.runCtx, directory.WatchConfig{
			Path: cfg.Directory, Signals: []os.Signal{syscall.SIGHUP}, Logger: n.log.With("role", "directory"),
			OnReload: func(_ *directory.Directory, err error) {
				if f := n.dirChanged.Load(); err == nil && f != nil {
					(*f)()
				}
			},
		})
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		n.closers = append(n.closers, func() { w.Close() })
		n.dirWatch, n.dir = w, w
	}
	n.who = people{src: n.dir}
	if cfg.has(roleAPI) {
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			return fmt.Errorf("serve: listen %s: %w%s", cfg.Addr, err, busyHint(err, "--addr", "ADDR=127.0.0.1:8081"))
		}
		n.closers = append(n.closers, func() { ln.Close() })
		n.ln, n.url = n.limit(ln), "http://"+ln.Addr().String()
	}
	if err := n.serveMetrics(); err != nil {
		return err
	}
	n.publicURL = cfg.PublicURL
	if n.publicURL == "" {
		n.publicURL = n.url
		if n.publicURL == "" {
			n.publicURL = "http://" + cfg.Addr
		}
	}
	n.publicURL = strings.TrimRight(n.publicURL, "/")
	parts, err := buildChannels(cfg, n.publicURL, n.dir, n.log)
	if err != nil {
		return err
	}
	n.parts = parts
	if cfg.has(roleArbiter) || cfg.has(roleAPI) {
		if n.receipts, err = loadReceiptKeys(cfg, n.log); err != nil {
			return err
		}
	}
	return nil
}

// startNotifier starts the notifier role and returns its durable consumers.
func (n *node) startNotifier(ctx context.Context) ([]events.Consumer, error) {
	js, err := jetstream.New(n.cs.notifier)
	if err != nil {
		return nil, err
	}
	retry, err := n.cfg.Notify.Retry.policy()
	if err != nil {
		return nil, err
	}
	fanout, err := n.cfg.Notify.Fanout.policy()
	if err != nil {
		return nil, err
	}
	if n.parts.pushDevices != nil {
		n.parts.pushDevices.use(js)
	}
	// The dispatcher follows the live directory itself, through js: who
	// may be told of a request is judged by what the arbiter judges by.
	d, err := dispatch.New(ctx, dispatch.Config{
		JS: js, Channels: n.parts.channels, People: n.who, Endpoints: n.parts.endpoints, Retry: retry, Fanout: fanout,
		Logger: n.log.With("role", "notifier"), Registerer: n.reg, OnDeadLetter: n.onDeadLetter,
	})
	if err != nil {
		return nil, err
	}
	n.run("notifier", d.Run)
	consumers := []events.Consumer{
		{JS: js, Stream: contracts.StreamRequests, Durable: dispatch.DurableRequests},
		{JS: js, Stream: contracts.StreamEvents, Durable: dispatch.DurableDecided},
		{JS: js, Stream: contracts.StreamEvents, Durable: dispatch.DurableChanges},
	}
	sinks, err := n.startAuditSinks(js)
	return append(consumers, sinks...), err
}

// startAuditSinks starts the audit log's sinks (audit.sinks), in the
// notifier role, and returns their durable consumers.
func (n *node) startAuditSinks(js jetstream.JetStream) ([]events.Consumer, error) {
	sinks, err := n.cfg.Audit.sinks()
	if err != nil || len(sinks) == 0 {
		return nil, err
	}
	r, err := auditsink.New(auditsink.Config{
		JS: js, Sinks: sinks, Logger: n.log.With("role", "notifier"), OnDeadLetter: n.onDeadLetter,
	})
	if err != nil {
		return nil, err
	}
	n.run("audit sinks", r.Run)
	var out []events.Consumer
	for _, d := range r.Durables() {
		out = append(out, events.Consumer{JS: js, Stream: audit.Stream, Durable: d})
	}
	return out, nil
}

// startArbiter starts the arbiter role and returns its durable consumers.
func (n *node) startArbiter(ctx context.Context) ([]events.Consumer, error) {
	js, err := jetstream.New(n.cs.arbiter)
	if err != nil {
		return nil, err
	}
	// The arbiter checks each request against the policy version it names:
	// applied versions are read from hitl_policy (the API seeds --policy
	// there), the built-in default is known, and the file given to this
	// process is trusted as well, for an arbiter that starts before any API
	// has seeded it.
	var trusted arbiter.Policies
	if n.polSource != nil {
		trusted = arbiter.Policies{n.pol}
	}
	reviewers, err := n.cfg.reviewerEndpoints()
	if err != nil {
		return nil, err
	}
	arb, err := arbiter.New(ctx, arbiter.Config{
		JS: js, Logger: n.log.With("role", "arbiter"), Registerer: n.reg,
		Retention: n.cfg.retention, OnDeadLetter: n.onDeadLetter, Policies: trusted,
		Receipts: n.receipts.signer, Audit: n.cfg.Audit.arbiter(), Reviewers: reviewers,
		DeferTimers: arbiter.DefaultDeferTimers,
	})
	if err != nil {
		return nil, err
	}
	n.run("arbiter", arb.Run)
	return []events.Consumer{
		{JS: js, Stream: contracts.StreamRequests, Durable: arbiter.DurableRequests},
		{JS: js, Stream: contracts.StreamResolutions, Durable: arbiter.DurableResolutions},
		{JS: js, Stream: contracts.StreamTimers, Durable: arbiter.DurableTimers},
		{JS: js, Stream: contracts.StreamEvents, Durable: arbiter.DurableGrantUses},
	}, nil
}

// startAPI starts the API role: the gate, the HTTP API and the inbox, the
// Slack and email endpoints, and prints where everything is.
func (n *node) startAPI(ctx context.Context, out *os.File) error {
	cfg := n.cfg
	tokens, devToken, err := apiTokens(cfg, n.log)
	if err != nil {
		return err
	}
	js, err := jetstream.New(n.cs.api)
	if err != nil {
		return err
	}
	og, err := n.startGate(ctx, js)
	if err != nil {
		return err
	}
	srv, err := n.newAPIServer(ctx, js, tokens, og)
	if err != nil {
		return err
	}
	n.closers = append(n.closers, func() { srv.Close() })
	changed := srv.DirectoryChanged
	n.dirChanged.Store(&changed)
	oc, err := cfg.OIDC.inboxOIDC(n.publicURL, n.dir)
	if err != nil {
		return err
	}
	if _, err := inbox.New(ctx, inbox.Config{API: srv, JS: js, Logger: n.log.With("role", "inbox"), Registerer: n.reg, OIDC: oc}); err != nil {
		return err
	}
	slackH, emailH, err := n.channelHandlers(srv, js)
	if err != nil {
		return err
	}
	serveHTTP(n.runCtx, &n.wg, n.errc, n.ln, cfg.Budgets.httpServer(channelRoutes(srv.Handler(), slackH, emailH)))
	info := serveInfo{URL: n.url, NATSURL: n.cs.natsURL, PID: os.Getpid()}
	if err := writeJSON(filepath.Join(cfg.Data, fileServe), info, 0o600); err != nil {
		return err
	}
	n.printBanner(out, devToken, og.policies)
	return nil
}

// apiGate is the orchestrator the API role reviews through.
type apiGate struct {
	waiter   *orchestrator.Waiter
	policies *orchestrator.PolicyStore
	gate     *orchestrator.Gate
}

// startGate starts the API role's waiter, policy store (seeded from the
// policy file when one is given) and gate, each closed with the node.
func (n *node) startGate(ctx context.Context, js jetstream.JetStream) (apiGate, error) {
	// The API's listing index watches the approvals bucket and hands every
	// change to the gate's waiter: one watch of the bucket per process.
	waiter, err := orchestrator.NewFedWaiter(ctx, js, n.log.With("role", "waiter"))
	if err != nil {
		return apiGate{}, err
	}
	n.closers = append(n.closers, func() { waiter.Close() })
	if n.polSource != nil {
		if err := seedPolicy(ctx, js, n.polSource, n.cfg.Policy, n.log); err != nil {
			return apiGate{}, err
		}
	}
	policies, err := orchestrator.OpenPolicyStore(ctx, orchestrator.PolicyStoreConfig{
		JS: js, Fallback: n.pol, Logger: n.log.With("role", "orchestrator"),
	})
	if err != nil {
		return apiGate{}, err
	}
	n.closers = append(n.closers, func() { policies.Close() })
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{
		JS: js, Policy: policies, Waiter: waiter, Directory: n.dir,
		Logger: n.log.With("role", "orchestrator"), Retention: n.cfg.retention, Registerer: n.reg,
	})
	if err != nil {
		return apiGate{}, err
	}
	return apiGate{waiter: waiter, policies: policies, gate: gate}, nil
}

// indexNoteFile is where, in the data directory, the API's records index
// notes what it holds (api.Config.IndexSnapshot).
const indexNoteFile = "records-index.json"

// newAPIServer is the HTTP API over og, with passkeys bound to the public
// URL when they can be.
func (n *node) newAPIServer(ctx context.Context, js jetstream.JetStream, tokens []api.Token, og apiGate) (*api.Server, error) {
	cfg := n.cfg
	nc := n.cs.api
	passkeys, off, err := cfg.Passkeys.resolve(n.publicURL)
	if err != nil {
		return nil, err
	}
	if len(passkeys.Origins) > 0 {
		n.passkeyOrigin = passkeys.Origins[0]
	}
	if off != "" {
		n.log.Info("passkeys are off: rules with step_up passkey can only be rejected", "why", off)
	}
	return api.New(ctx, api.Config{
		JS: js, Gate: og.gate, Waiter: og.waiter, Policies: og.policies, Tokens: tokens, Directory: n.dir, Logger: n.log.With("role", "api"),
		Registerer: n.reg, Gatherer: n.reg, ReceiptKeys: n.receipts.public, Receipts: n.receipts.apiSigner,
		IndexRecent: n.cfg.IndexRecent, IndexSnapshot: filepath.Join(cfg.Data, indexNoteFile),
		Budgets: cfg.Budgets.Budgets, BudgetRefusals: n.budgetRefusals,
		Metrics: cfg.Metrics.access(cfg.Addr), MetricsTokens: cfg.Metrics.hashes(),
		Passkeys: passkeys, Push: n.parts.push,
		Ready: func(context.Context) error {
			if !nc.IsConnected() {
				return errors.New("NATS is not connected")
			}
			return nil
		},
	})
}

// channelHandlers are the HTTP endpoints of the Slack and email channels
// that are configured (nil for the others).
func (n *node) channelHandlers(srv *api.Server, js jetstream.JetStream) (slackH, emailH http.Handler, err error) {
	var readRule notifier.ReadRule
	if n.parts.slackCfg != nil || n.parts.links != nil {
		// Pages and Slack answers show a request only to whom may read it,
		// judged by the live directory as the arbiter judges votes.
		live := audience.New(js, n.log.With("role", "api", "part", "directory"))
		n.run("directory", func(ctx context.Context) error { live.Run(ctx); return nil })
		readRule = live.ReadRule(n.who.book)
	}
	if n.parts.slackCfg != nil {
		sc := *n.parts.slackCfg
		sc.Resolver, sc.Users, sc.ReadRule = srv.Resolver(), n.who.slackUsers, readRule
		h, err := slack.NewInteractions(sc)
		if err != nil {
			return nil, nil, fmt.Errorf("serve: slack interactions: %w", err)
		}
		n.closers = append(n.closers, h.Wait)
		slackH = h
	}
	if n.parts.links != nil {
		h, err := email.NewPages(email.PagesConfig{Links: n.parts.links, Resolver: srv.Resolver(), ReadRule: readRule,
			Logger: n.log.With("channel", "email")})
		if err != nil {
			return nil, nil, fmt.Errorf("serve: email pages: %w", err)
		}
		emailH = h
	}
	return slackH, emailH, nil
}

// printBanner tells the person who started serve where everything is.
func (n *node) printBanner(out *os.File, devToken string, policies *orchestrator.PolicyStore) {
	cfg, url := n.cfg, n.url
	fmt.Fprintf(out, "Countersign is running.\n")
	fmt.Fprintf(out, "  Inbox:          %s/  (sign in with a token)\n", url)
	if o := n.passkeyOrigin; o != "" && o != url {
		fmt.Fprintf(out, "  Passkeys:       enrol and sign at %s/ (passkeys are bound to that address)\n", o)
	}
	fmt.Fprintf(out, "  API:            %s/v1  (OpenAPI at %s/openapi.json)\n", url, url)
	if n.cs.natsURL != "" {
		fmt.Fprintf(out, "  NATS:           %s (credentials in %s)\n", n.cs.natsURL, filepath.Join(cfg.Data, fileResolver))
	}
	if devToken != "" {
		fmt.Fprintf(out, "  Dev token:      %s\n", devToken)
		fmt.Fprintf(out, "                  (shown once; kept in %s, mode 0600, for the CLI on this machine)\n", filepath.Join(cfg.Data, fileDevToken))
	} else if len(cfg.Tokens) == 0 {
		fmt.Fprintf(out, "  Dev token:      in %s\n", filepath.Join(cfg.Data, fileDevToken))
	}
	if n.dirWatch != nil {
		d := n.dirWatch.Current()
		fmt.Fprintf(out, "  Directory:      %s (%d users, %d groups; reloaded when it changes and on SIGHUP)\n", cfg.Directory, d.Len(), len(d.Groups()))
	}
	if cfg.has(roleNotifier) {
		if len(n.parts.summary) == 0 {
			fmt.Fprintf(out, "  Notifications:  none configured (add notify: to the config; see docs/notifications.md)\n")
		} else {
			fmt.Fprintf(out, "  Notifications:  %s (links to %s)\n", strings.Join(n.parts.summary, "; "), n.publicURL)
		}
	}
	if doc, _, ok := policies.Live(); ok {
		fmt.Fprintf(out, "  Policy:         version %s, live (applied by %s; change it with 'countersign policy apply FILE')\n", doc.Version, doc.AppliedBy)
	} else {
		fmt.Fprintf(out, "  Policy:         %s (version %s)\n", policyName(cfg.Policy), n.pol.Version())
	}
}

// startHealth serves /healthz, /readyz and /metrics for roles that run
// without the API, on the same address.
func (n *node) startHealth(out *os.File) error {
	ln, err := net.Listen("tcp", n.cfg.Addr)
	if err != nil {
		return fmt.Errorf("serve: listen %s: %w", n.cfg.Addr, err)
	}
	serveHTTP(n.runCtx, &n.wg, n.errc, n.limit(ln), n.cfg.Budgets.httpServer(healthHandler(n.cs, healthMetrics(n.cfg, n.reg))))
	fmt.Fprintf(out, "Countersign is running roles %s.\n", strings.Join(n.cfg.Roles, ","))
	fmt.Fprintf(out, "  Health:         http://%s/healthz, /readyz, /metrics\n", ln.Addr())
	return nil
}

// limit puts the connection budgets on an HTTP listener.
func (n *node) limit(ln net.Listener) net.Listener {
	b := &n.cfg.Budgets
	return newBudgetListener(ln, b.connectionLimit(n.log), b.MaxConnectionsPerAddress, b.write, n.budgetRefusals)
}

// serveMetrics serves /metrics alone on metrics.listen, when it is set, to
// whoever reaches that address.
func (n *node) serveMetrics() error {
	addr := n.cfg.Metrics.Listen
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: metrics.listen %s: %w", addr, err)
	}
	n.closers = append(n.closers, func() { ln.Close() })
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", api.MetricsHandler(n.reg, api.MetricsOpen, nil))
	serveHTTP(n.runCtx, &n.wg, n.errc, n.limit(ln), n.cfg.Budgets.httpServer(mux))
	n.log.Info("serving /metrics", "addr", ln.Addr().String())
	return nil
}

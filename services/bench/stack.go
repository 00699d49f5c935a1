package bench

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/services/arbiter"
)

// Connection roles. Each has its own client connection and connects as
// the NATS user of the Countersign role it plays, with production's grants
// (the server checks them on every message, as in production); the raw
// baselines and provisioning use the admin user.
const (
	roleArbiter   = "arbiter"
	roleAgent     = "agent"
	roleVoter     = "voter"
	roleObserver  = "observer"
	roleRaw       = "raw"
	roleRawWatch  = "raw-watch"
	roleProvision = "provision"
	roleAPI       = "api"
)

// userRoles maps each connection role to its Countersign role.
var userRoles = map[string]embedded.Role{
	roleArbiter: embedded.RoleArbiter, roleAgent: embedded.RoleOrchestrator, roleVoter: embedded.RoleResolver,
	roleObserver: embedded.RoleResolver, roleRaw: embedded.RoleAdmin, roleRawWatch: embedded.RoleAdmin,
	roleProvision: embedded.RoleAdmin, roleAPI: embedded.RoleAPI,
}

// stack is one embedded server with an arbiter and a gate, as a single
// `countersign serve` process runs them.
type stack struct {
	mode string
	dir  string
	// servers are the embedded servers: one, or three or five for a cluster.
	servers []*server.Server
	// users are the servers' NATS users, one per Countersign role.
	users    map[embedded.Role]embedded.User
	url      string
	replicas int
	conns    []*nats.Conn

	agentJS jetstream.JetStream
	voterJS jetstream.JetStream
	// votes sends the bot's votes (stack.vote).
	votes events.VoteSender
	kv    jetstream.KeyValue // read through the voter's connection
	gate  *orchestrator.Gate
	reg   *prometheus.Registry

	// restoreProcs puts back GOMAXPROCS after a store that synced every
	// write, for which the stack raised it as `countersign serve` does.
	restoreProcs func()

	voteErrs     atomic.Int64 // async vote publishes that failed
	stopArbiter  context.CancelFunc
	arbiterDone  chan error
	arbiterError error
}

// voteWindow bounds the bot's votes in flight.
const voteWindow = 4096

func startStack(ctx context.Context, mode, root string, arbiterConcurrency int) (st *stack, err error) {
	dir, err := os.MkdirTemp(root, "store-"+mode+"-")
	if err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	st = &stack{mode: mode, dir: dir}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if err := st.startServers(); err != nil {
		return st, err
	}

	_, adminJS, err := st.connect(roleProvision)
	if err != nil {
		return st, err
	}
	if err := provisionWhenPlaced(ctx, adminJS, st.replicas); err != nil {
		return st, err
	}
	_, arbJS, err := st.connect(roleArbiter)
	if err != nil {
		return st, err
	}
	st.reg = prometheus.NewRegistry()
	arb, err := arbiter.New(ctx, arbiter.Config{JS: arbJS, Registerer: st.reg, Concurrency: arbiterConcurrency,
		DeferTimers: arbiter.DefaultDeferTimers})
	if err != nil {
		return st, err
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.stopArbiter = cancel
	st.arbiterDone = make(chan error, 1)
	go func() { st.arbiterDone <- arb.Run(actx) }()

	if _, st.agentJS, err = st.connect(roleAgent); err != nil {
		return st, err
	}
	st.gate, err = orchestrator.NewGate(ctx, orchestrator.Config{JS: st.agentJS})
	if err != nil {
		return st, err
	}
	if _, st.voterJS, err = st.connect(roleVoter,
		jetstream.WithPublishAsyncMaxPending(voteWindow),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { st.voteErrs.Add(1) }),
	); err != nil {
		return st, err
	}
	if st.kv, err = st.voterJS.KeyValue(ctx, contracts.BucketApprovals); err != nil {
		return st, err
	}
	return st, nil
}

// clusterStart bounds how long a store may take to come up: a bound, not
// a measurement; a loaded machine (a test suite on two cores) can take long
// to start three servers and elect their leaders.
const clusterStart = 2 * time.Minute

// provisionWhenPlaced provisions the streams and buckets; on a cluster,
// events.Provision retries while the cluster forms and returns once every
// stream and bucket has a leader and current replicas.
func provisionWhenPlaced(ctx context.Context, js jetstream.JetStream, replicas int) error {
	pctx, cancel := context.WithTimeout(ctx, clusterStart)
	defer cancel()
	if err := events.Provision(pctx, js, events.ProvisionConfig{Replicas: replicas}); err != nil {
		if replicas > 1 {
			return fmt.Errorf("the %d-node cluster did not come up within %s: %w", replicas, clusterStart, err)
		}
		return err
	}
	return nil
}

// connect opens one role's connection.
func (st *stack) connect(role string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	u, ok := st.users[userRoles[role]]
	if !ok {
		return nil, nil, fmt.Errorf("connect %s: no NATS user for it", role)
	}
	nc, err := nats.Connect(st.url, nats.Name("countersign-bench-"+role), nats.MaxReconnects(-1), nats.UserInfo(u.Name, u.Password),
		embedded.InboxOption(u.Role))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", role, err)
	}
	st.conns = append(st.conns, nc)
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream %s: %w", role, err)
	}
	return nc, js, nil
}

// arbiterFailed reports an arbiter that stopped on its own.
func (st *stack) arbiterFailed() error {
	select {
	case err := <-st.arbiterDone:
		st.arbiterDone = nil
		if err == nil {
			err = errors.New("stopped")
		}
		st.arbiterError = fmt.Errorf("arbiter: %w", err)
	default:
	}
	return st.arbiterError
}

// metric reads a counter of the arbiter, summed over its labels.
func (st *stack) metric(name string) float64 {
	mfs, err := st.reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func (st *stack) close() {
	if st.gate != nil {
		_ = st.gate.Close()
	}
	if st.stopArbiter != nil {
		st.stopArbiter()
		if st.arbiterDone != nil {
			select {
			case <-st.arbiterDone:
			case <-time.After(30 * time.Second):
			}
		}
	}
	for _, nc := range st.conns {
		nc.Close()
	}
	for _, ns := range st.servers {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	if st.restoreProcs != nil {
		st.restoreProcs()
	}
	if st.dir != "" {
		_ = os.RemoveAll(st.dir)
	}
}

// startServers starts the embedded server, or for a cluster its servers
// routed to each other on loopback, and waits until JetStream is ready
// (for the cluster: a meta leader that every node follows).
func (st *stack) startServers() error {
	if st.mode == SyncAlways {
		// As `countersign serve` does with its embedded server. The
		// cluster's nodes stand for nats-server processes of their own,
		// which Countersign does not tune.
		_, _, st.restoreProcs = embedded.RaiseProcsForSyncWrites()
	}
	n := clusterNodes(st.mode)
	st.replicas = min(n, 3)
	users := st.generateUsers()
	// A node's route port is picked free before its server binds it, and
	// another process may take it meanwhile: the server then cannot listen
	// and says so as a fatal error. The nodes start again on other ports.
	var err error
	for attempt := range startAttempts {
		if err = st.startNodes(users, n, attempt); !errors.Is(err, errNodeCannotListen) {
			break
		}
		for _, ns := range st.servers {
			ns.Shutdown()
		}
		st.servers = nil
	}
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	return st.awaitCluster()
}

// startAttempts bounds how often the nodes start again on other ports.
const startAttempts = 3

// errNodeCannotListen is a node that could not listen on its ports.
var errNodeCannotListen = errors.New("a node could not listen")

// startNodes starts n servers (attempt numbers their store directories)
// and returns once every one is ready for connections.
func (st *stack) startNodes(users []*server.User, n, attempt int) error {
	routePorts, routes, err := loopbackRoutes(n)
	if err != nil {
		return err
	}
	logs := make([]*startLog, n)
	for i := range n {
		ns, err := server.NewServer(st.serverOptions(i, users, routePorts, routes, attempt))
		if err != nil {
			return fmt.Errorf("embedded server: %w", err)
		}
		logs[i] = &startLog{failed: make(chan struct{})}
		ns.SetLogger(logs[i], false, false)
		go ns.Start()
		st.servers = append(st.servers, ns)
	}
	var urls []string
	for i, ns := range st.servers {
		ready := make(chan bool, 1)
		go func() { ready <- ns.ReadyForConnections(clusterStart) }()
		select {
		case ok := <-ready:
			if !ok {
				return fmt.Errorf("embedded server %s not ready for connections within %s", ns.Name(), clusterStart)
			}
		case <-logs[i].failed:
			return fmt.Errorf("%w: embedded server %s: %s", errNodeCannotListen, ns.Name(), logs[i].err)
		}
		urls = append(urls, ns.ClientURL())
	}
	st.url = strings.Join(urls, ",")
	return nil
}

// startLog is a server's logger that keeps the first fatal error: a server
// that cannot listen on a port reports it so and goes on without it.
type startLog struct {
	once   sync.Once
	failed chan struct{}
	err    string
}

func (l *startLog) Fatalf(format string, v ...any) {
	l.once.Do(func() { l.err = fmt.Sprintf(format, v...); close(l.failed) })
}
func (l *startLog) Noticef(string, ...any) {}
func (l *startLog) Warnf(string, ...any)   {}
func (l *startLog) Errorf(string, ...any)  {}
func (l *startLog) Debugf(string, ...any)  {}
func (l *startLog) Tracef(string, ...any)  {}

// generateUsers makes the servers' NATS users, one per Countersign role
// with production's grants, and keeps them in st.users.
func (st *stack) generateUsers() []*server.User {
	st.users = map[embedded.Role]embedded.User{}
	var users []*server.User
	for _, u := range embedded.GenerateUsers(embedded.Roles...) {
		st.users[u.Role] = u
		users = append(users, &server.User{Username: u.Name, Password: u.Password, Permissions: embedded.Permissions(u.Role)})
	}
	return users
}

// loopbackRoutes picks a free loopback route port for each of n servers
// and the route URLs that join them.
func loopbackRoutes(n int) (ports []int, routes []*neturl.URL, err error) {
	ports = make([]int, n)
	for i := range ports {
		p, err := embedded.FreePort()
		if err != nil {
			return nil, nil, err
		}
		ports[i] = p
	}
	for _, p := range ports {
		routes = append(routes, &neturl.URL{Scheme: "nats-route", Host: "127.0.0.1:" + strconv.Itoa(p)})
	}
	return ports, routes, nil
}

// serverOptions are the options of server i of the stack: clustered over
// routes when there is more than one.
func (st *stack) serverOptions(i int, users []*server.User, routePorts []int, routes []*neturl.URL, attempt int) *server.Options {
	store := filepath.Join(st.dir, strconv.Itoa(i+1))
	if attempt > 0 {
		store = filepath.Join(st.dir, "start-"+strconv.Itoa(attempt), strconv.Itoa(i+1))
	}
	opts := &server.Options{
		ServerName: fmt.Sprintf("countersign-bench-%s-%d", st.mode, i+1),
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   store,
		SyncAlways: st.mode != SyncLazy,
		NoLog:      true,
		NoSigs:     true,
		Users:      users,
	}
	if len(routePorts) > 1 {
		opts.Cluster = server.ClusterOpts{Name: "countersign-bench", Host: "127.0.0.1", Port: routePorts[i]}
		opts.Routes = routes
	}
	return opts
}

// awaitCluster waits until the cluster's JetStream has formed: one meta
// leader, every node current with it, and the leader seeing every node's
// JetStream online (before that it refuses to place replicas). The cluster
// has no event for it; it is polled, bounded by clusterStart, and the error
// says which of these was missing.
func (st *stack) awaitCluster() error {
	deadline := time.Now().Add(clusterStart)
	for {
		why := st.clusterForming()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d-node JetStream cluster did not form within %s: %s", len(st.servers), clusterStart, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterForming says what the cluster still lacks, or "" once formed.
func (st *stack) clusterForming() string {
	n := len(st.servers)
	var leader *server.Server
	leaders, current := 0, 0
	for _, ns := range st.servers {
		if ns.JetStreamIsLeader() {
			leaders, leader = leaders+1, ns
		}
		if ns.JetStreamIsCurrent() {
			current++
		}
	}
	switch {
	case leaders != 1:
		return fmt.Sprintf("%d meta leaders, want 1", leaders)
	case current != n:
		return fmt.Sprintf("%d of %d nodes current with the meta leader", current, n)
	}
	if peers := leader.JetStreamClusterPeers(); len(peers) != n {
		return fmt.Sprintf("the meta leader sees JetStream on %d of %d nodes (%s)", len(peers), n, strings.Join(peers, ", "))
	}
	return ""
}

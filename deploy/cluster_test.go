package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

var clusterNodes = []string{"cluster/n1.conf", "cluster/n2.conf", "cluster/n3.conf"}

func loadNode(t *testing.T, path string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return opts
}

func TestClusterConfigsMatchPermissions(t *testing.T) {
	pw := setPasswords(t)
	for _, path := range clusterNodes {
		opts := loadNode(t, path)
		if opts.SystemAccount != "SYS" {
			t.Errorf("%s: system_account %q, want SYS", path, opts.SystemAccount)
		}
		seen := map[string]bool{}
		for _, u := range opts.Users {
			seen[u.Username] = true
			if u.Password != pw[u.Username] {
				t.Errorf("%s: %s: password not taken from %s", path, u.Username, passwordEnv(u.Username))
			}
			if u.Username == "sys" {
				if u.Account == nil || u.Account.Name != "SYS" {
					t.Errorf("%s: sys is in account %v, want SYS", path, u.Account)
				}
				continue
			}
			r := embedded.Role(u.Username)
			if !r.Valid() {
				t.Errorf("%s: user %q is not a role", path, u.Username)
				continue
			}
			if u.Account == nil || u.Account.Name != "COUNTERSIGN" {
				t.Errorf("%s: %s is in account %v, want COUNTERSIGN", path, r, u.Account)
			}
			comparePermissions(t, path, r, u.Permissions)
		}
		for _, u := range natsUsers() {
			if !seen[u] {
				t.Errorf("%s: no user %q", path, u)
			}
		}
		if len(opts.Users) != len(natsUsers()) {
			t.Errorf("%s: %d users, want %d (one per role and sys)", path, len(opts.Users), len(natsUsers()))
		}
	}
}

func TestClusterConfigsAreOneCluster(t *testing.T) {
	setPasswords(t)
	var nodes []*server.Options
	for _, path := range clusterNodes {
		nodes = append(nodes, loadNode(t, path))
	}
	names, clusterAddrs := map[string]bool{}, map[string]bool{}
	clientAddrs, httpAddrs, stores := map[string]bool{}, map[string]bool{}, map[string]bool{}
	unique := func(seen map[string]bool, what, v, path string) {
		if v == "" || seen[v] {
			t.Errorf("%s: %s %q is empty or used by another node", path, what, v)
		}
		seen[v] = true
	}
	for i, o := range nodes {
		path := clusterNodes[i]
		unique(names, "server_name", o.ServerName, path)
		unique(clusterAddrs, "cluster listen", net.JoinHostPort(o.Cluster.Host, strconv.Itoa(o.Cluster.Port)), path)
		unique(clientAddrs, "listen", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), path)
		unique(httpAddrs, "http", net.JoinHostPort(o.HTTPHost, strconv.Itoa(o.HTTPPort)), path)
		unique(stores, "jetstream.store_dir", o.StoreDir, path)
		if o.Cluster.Name != "countersign" || !o.Cluster.NoAdvertise {
			t.Errorf("%s: cluster name %q, no_advertise %v; want countersign, true", path, o.Cluster.Name, o.Cluster.NoAdvertise)
		}
		if !o.JetStream || !o.SyncAlways {
			t.Errorf("%s: jetstream %v, sync_interval always %v; want both", path, o.JetStream, o.SyncAlways)
		}
		if o.Host != "127.0.0.1" || o.Cluster.Host != "127.0.0.1" || o.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: listens on %s, %s, %s; the defaults are loopback", path, o.Host, o.Cluster.Host, o.HTTPHost)
		}
	}
	// Every node routes to every node's cluster listen address.
	for i, o := range nodes {
		var routes []string
		for _, u := range o.Routes {
			if u.Scheme != "nats" {
				t.Errorf("%s: route %s is not nats://", clusterNodes[i], u)
			}
			routes = append(routes, u.Host)
		}
		slices.Sort(routes)
		want := slices.Sorted(func(yield func(string) bool) {
			for a := range clusterAddrs {
				if !yield(a) {
					return
				}
			}
		})
		if !slices.Equal(routes, want) {
			t.Errorf("%s: routes %q, want every node's cluster address %q", clusterNodes[i], routes, want)
		}
	}
}

func TestClusterConfigsRequirePasswords(t *testing.T) {
	for _, missing := range natsUsers() {
		setPasswords(t)
		os.Unsetenv(passwordEnv(missing)) // restored by t.Setenv
		for _, path := range clusterNodes {
			_, err := server.ProcessConfigFile(path)
			if err == nil {
				t.Errorf("%s loaded without %s", path, passwordEnv(missing))
			} else if !strings.Contains(err.Error(), passwordEnv(missing)) {
				t.Errorf("%s: error %q should name %s", path, err, passwordEnv(missing))
			}
		}
	}
}

// testCluster runs the three node configs in-process on loopback, each with
// its own store directory. Client ports are random; cluster ports are
// reserved up front, because every node's routes name the others.
type testCluster struct {
	t       *testing.T
	stores  []string
	nodes   []*server.Server
	cluster map[int]int // cluster port in the files → reserved port
}

// freePort reserves a loopback port by listening on it and closing it.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startNode starts node i from its config file with the ports rewritten:
// the cluster listen port and every route's port are mapped to the
// reserved ones, so the mesh is the one the files describe.
func (c *testCluster) startNode(i int) {
	t := c.t
	t.Helper()
	o := loadNode(t, clusterNodes[i])
	o.Host, o.Port = "127.0.0.1", -1
	o.HTTPPort = 0
	o.Cluster.Port = c.cluster[o.Cluster.Port]
	for _, r := range o.Routes {
		p, err := strconv.Atoi(r.Port())
		if err != nil || c.cluster[p] == 0 {
			t.Fatalf("%s: route %s is not a node of the cluster", clusterNodes[i], r)
		}
		r.Host = net.JoinHostPort(r.Hostname(), strconv.Itoa(c.cluster[p]))
	}
	o.StoreDir = c.stores[i]
	o.NoLog, o.NoSigs = true, true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("%s: %v", clusterNodes[i], err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("%s: not ready", clusterNodes[i])
	}
	c.nodes[i] = ns
}

func (c *testCluster) stop(i int) {
	c.nodes[i].Shutdown()
	c.nodes[i].WaitForShutdown()
	c.nodes[i] = nil
}

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: make([]*server.Server, 3), cluster: map[int]int{}}
	for _, path := range clusterNodes {
		c.stores = append(c.stores, t.TempDir())
		c.cluster[loadNode(t, path).Cluster.Port] = freePort(t)
	}
	t.Cleanup(func() {
		for i, ns := range c.nodes {
			if ns != nil {
				c.stop(i)
			}
		}
	})
	for i := range clusterNodes {
		c.startNode(i)
	}
	c.waitMetaLeader(3)
	return c
}

// waitMetaLeader waits until the running nodes (want of them) agree on a
// JetStream meta leader. NATS offers no notification for this, so it polls
// with a deadline.
func (c *testCluster) waitMetaLeader(want int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		running, current, leaders := 0, 0, 0
		for _, ns := range c.nodes {
			if ns == nil {
				continue
			}
			running++
			if ns.JetStreamIsCurrent() {
				current++
			}
			if ns.JetStreamIsLeader() {
				leaders++
			}
		}
		if running == want && current == want && leaders == 1 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no JetStream meta leader: %d running, %d current, %d leaders", running, current, leaders)
		}
		<-tick.C
	}
}

// provisionR3 provisions with three replicas. Right after the meta leader
// is elected it may not yet see every peer online and refuses placement
// ("no suitable peers"); NATS offers no signal for that, so the refusal is
// retried until ctx ends.
func provisionR3(ctx context.Context, js jetstream.JetStream) error {
	for {
		err := events.Provision(ctx, js, events.ProvisionConfig{Replicas: 3})
		if err == nil || !strings.Contains(err.Error(), "no suitable peers") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func connectAs(t *testing.T, ns *server.Server, user, password string) jetstream.JetStream {
	t.Helper()
	js, _ := connectWithErrors(t, ns, user, password)
	return js
}

// connectWithErrors also returns the connection's asynchronous errors
// (permission violations arrive there).
func connectWithErrors(t *testing.T, ns *server.Server, user, password string) (jetstream.JetStream, <-chan error) {
	t.Helper()
	errc := make(chan error, 16)
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, password), embedded.InboxOptionFor(user), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errc <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, errc
}

func TestClusterProvisionsR3(t *testing.T) {
	pw := setPasswords(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connectAs(t, c.nodes[0], "admin", pw["admin"])
	cfg := events.ProvisionConfig{Replicas: 3}
	if err := provisionR3(ctx, admin); err != nil {
		t.Fatalf("Provision R3 as admin: %v", err)
	}
	names := []string{"KV_" + contracts.BucketApprovals, "KV_" + contracts.BucketPolicy, "KV_" + contracts.BucketSessions}
	for _, sc := range events.StreamConfigs(cfg) {
		names = append(names, sc.Name)
	}
	for _, name := range names {
		s, err := admin.Stream(ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 {
			t.Errorf("stream %s: %d replicas, want 3", name, info.Config.Replicas)
		}
		// Records and sessions are read from the leader, never from a
		// follower that may be behind.
		if (name == "KV_"+contracts.BucketApprovals || name == "KV_"+contracts.BucketSessions) && info.Config.AllowDirect {
			t.Errorf("stream %s: direct gets allowed on a replicated bucket (a lagging follower may answer)", name)
		}
		if info.Config.Storage != jetstream.FileStorage {
			t.Errorf("stream %s: storage %v, want file", name, info.Config.Storage)
		}
		if info.Cluster == nil || info.Cluster.Name != "countersign" || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: cluster %+v, want a leader and 2 followers in cluster countersign", name, info.Cluster)
		}
	}

	// A role user cannot provision: only admin manages streams.
	arbiter, errc := connectWithErrors(t, c.nodes[1], "arbiter", pw["arbiter"])
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	if err := events.Provision(dctx, arbiter, cfg); err == nil {
		t.Error("the arbiter user provisioned the streams; only admin may")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "$JS.API.STREAM.") {
			t.Errorf("arbiter provisioning: async error %v, want a permissions violation on the stream API", err)
		}
	default:
		t.Error("arbiter provisioning failed without a permissions violation")
	}
}

// backendUnavailable reports whether err is one of the failures the HTTP API
// answers with 503 "unavailable" (services/api backendError).
func backendUnavailable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func TestClusterQuorum(t *testing.T) {
	pw := setPasswords(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := connectAs(t, c.nodes[0], "admin", pw["admin"])
	if err := provisionR3(ctx, admin); err != nil {
		t.Fatalf("Provision R3: %v", err)
	}
	api := connectAs(t, c.nodes[0], "api", pw["api"])
	subject := func(n int) string { return contracts.SubjectToolRequestedPrefix + "agent" + strconv.Itoa(n) }
	publish := func(ctx context.Context, n int) error {
		_, err := api.Publish(ctx, subject(n), []byte(`{}`), jetstream.WithMsgID(fmt.Sprint("quorum-", n)))
		return err
	}
	// publishEventually retries while the streams elect new leaders; NATS
	// tells the publisher nothing about elections, so this polls with a
	// deadline. The message id makes a retry of a stored message harmless.
	publishEventually := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			err := publish(pctx, n)
			pcancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %d: %v", n, err)
			}
		}
	}
	publishEventually(1)

	// One node down: the other two are a quorum and keep accepting writes.
	c.stop(2)
	publishEventually(2)

	// Two nodes down: no quorum. Writes fail with an error the API maps to
	// 503 unavailable; nothing acknowledged before is lost.
	c.stop(1)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	err := publish(pctx, 3)
	pcancel()
	if err == nil {
		t.Fatal("a write was acknowledged by one node of three")
	}
	if !backendUnavailable(err) {
		t.Errorf("write without quorum: %v; want a timeout or no-responders error (503 unavailable)", err)
	}

	// Back to two nodes: writes resume and every acknowledged message is there.
	c.startNode(1)
	c.waitMetaLeader(2)
	publishEventually(4)
	s, err := admin.Stream(ctx, contracts.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 4} {
		if _, err := s.GetLastMsgForSubject(ctx, subject(n)); err != nil {
			t.Errorf("message %d, acknowledged, is missing after the outage: %v", n, err)
		}
	}
}

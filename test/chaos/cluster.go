package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events/embedded"
)

// The harness runs one NATS user with full rights: every Countersign role
// and the harness itself connect as it. Per-role least privilege is tested
// elsewhere; here the subject is faults, not permissions.
const (
	natsUser     = "chaos"
	natsPassword = "chaos-password"
)

// node is one in-process nats-server of the cluster. It can be stopped and
// started again on the same ports and store directory.
type node struct {
	name string
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
}

// cluster is a 3-node JetStream cluster on loopback.
type cluster struct {
	nodes []*node
}

// startCluster starts n nodes with stores under dir(i) and waits until
// JetStream answers through the cluster.
func startCluster(ctx context.Context, n int, dir func(i int) string) (*cluster, error) {
	clientPorts := make([]int, n)
	routePorts := make([]int, n)
	for i := range n {
		var err error
		if clientPorts[i], err = embedded.FreePort(); err != nil {
			return nil, err
		}
		if routePorts[i], err = embedded.FreePort(); err != nil {
			return nil, err
		}
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	c := &cluster{}
	for i := range n {
		nd := &node{name: fmt.Sprintf("chaos-%d", i+1)}
		nd.opts = server.Options{
			ServerName: nd.name,
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   dir(i),
			SyncAlways: true,
			NoLog:      true,
			NoSigs:     true,
			Users:      []*server.User{{Username: natsUser, Password: natsPassword}},
			Cluster: server.ClusterOpts{
				Name: "chaos",
				Host: "127.0.0.1",
				Port: routePorts[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
		c.nodes = append(c.nodes, nd)
	}
	// Start every node before waiting on any: a node is ready for clients
	// only once its routes can form.
	for _, nd := range c.nodes {
		if err := nd.launch(); err != nil {
			c.shutdown()
			return nil, err
		}
	}
	for _, nd := range c.nodes {
		if err := nd.waitReady(30 * time.Second); err != nil {
			c.shutdown()
			return nil, err
		}
	}
	if err := c.waitJetStream(ctx); err != nil {
		c.shutdown()
		return nil, err
	}
	return c, nil
}

func (nd *node) launch() error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil {
		return nil
	}
	o := nd.opts
	o.Routes = append(o.Routes[:0:0], nd.opts.Routes...)
	s, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("nats %s: %w", nd.name, err)
	}
	go s.Start()
	nd.srv = s
	return nil
}

func (nd *node) waitReady(d time.Duration) error {
	nd.mu.Lock()
	s := nd.srv
	nd.mu.Unlock()
	if s == nil || !s.ReadyForConnections(d) {
		return fmt.Errorf("nats %s: not ready for connections within %s", nd.name, d)
	}
	return nil
}

// stop shuts the node down (its store stays).
func (nd *node) stop() {
	nd.mu.Lock()
	s := nd.srv
	nd.srv = nil
	nd.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// start starts a stopped node again on the same ports and store.
func (nd *node) start() error {
	if err := nd.launch(); err != nil {
		return err
	}
	return nd.waitReady(30 * time.Second)
}

func (nd *node) running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv != nil
}

func (nd *node) url() string { return "nats://127.0.0.1:" + strconv.Itoa(nd.opts.Port) }

// urls is the comma-separated client URLs of every node.
func (c *cluster) urls() string {
	var us []string
	for _, nd := range c.nodes {
		us = append(us, nd.url())
	}
	return strings.Join(us, ",")
}

func (c *cluster) shutdown() {
	for _, nd := range c.nodes {
		nd.stop()
	}
}

// connect opens a client connection to the whole cluster that reconnects
// forever.
func (c *cluster) connect(name string) (*nats.Conn, error) {
	return nats.Connect(c.urls(), nats.UserInfo(natsUser, natsPassword), nats.Name(name),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
}

// waitJetStream waits until the cluster has a JetStream meta leader: the
// account info request is answered only then. There is no event for it, so
// it is asked at a short interval.
func (c *cluster) waitJetStream(ctx context.Context) error {
	nc, err := c.connect("chaos-wait")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "the JetStream meta leader", func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// waitStreams waits until every stream named answers a write-path request
// (its leader is elected): stream info carries the leader.
func waitStreams(ctx context.Context, js jetstream.JetStream, names []string) error {
	return waitFor(ctx, 90*time.Second, "stream leaders", func(ctx context.Context) error {
		for _, n := range names {
			s, err := js.Stream(ctx, n)
			if err != nil {
				return err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" {
				return fmt.Errorf("stream %s has no leader", n)
			}
			if len(info.Cluster.Replicas) < 2 {
				return fmt.Errorf("stream %s has %d replicas reporting", n, len(info.Cluster.Replicas))
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current {
					return fmt.Errorf("stream %s replica %s is not current", n, r.Name)
				}
			}
		}
		return nil
	})
}

// waitDrained waits until each durable consumer (by stream) has nothing
// left to deliver and nothing unacknowledged.
func waitDrained(ctx context.Context, js jetstream.JetStream, durables map[string]string) error {
	return waitFor(ctx, 90*time.Second, "consumers drained", func(ctx context.Context) error {
		for stream, durable := range durables {
			c, err := js.Consumer(ctx, stream, durable)
			if err != nil {
				return err
			}
			info := c.CachedInfo()
			if info.NumPending > 0 || info.NumAckPending > 0 {
				return fmt.Errorf("%s on %s: %d pending, %d unacknowledged", durable, stream, info.NumPending, info.NumAckPending)
			}
		}
		return nil
	})
}

// waitFor calls try until it succeeds, each attempt bounded to 5 s, for at
// most limit. It is for conditions the server announces no event for.
func waitFor(ctx context.Context, limit time.Duration, what string, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		actx, c := context.WithTimeout(ctx, 5*time.Second)
		last = try(actx)
		c()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

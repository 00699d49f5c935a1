// Package embedded runs a nats-server with JetStream inside the Countersign
// process: the default deployment of `countersign serve`. Each Countersign
// role connects in-process as its own NATS user with least-privilege
// permissions (see Permissions), so the embedded bus enforces the same rules
// as an external server configured from deploy/nats-server.conf; most
// importantly, only the arbiter can write approval records.
package embedded

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyTimeout bounds how long Start waits for the server to accept connections.
const readyTimeout = 10 * time.Second

// Config describes an embedded server.
type Config struct {
	// StoreDir is the JetStream store directory (required).
	StoreDir string
	// Host is the client listen address (default 127.0.0.1).
	Host string
	// Port is the TCP client port: -1 picks a random free port, 0 means the
	// NATS default 4222.
	Port int
	// NoListen runs without any TCP listener: only in-process connections.
	NoListen bool
	// SyncAlways fsyncs every write before it is acknowledged. Production
	// callers set it; without it JetStream syncs only every two minutes and
	// an acknowledged write can be lost on power failure.
	SyncAlways bool
	// Users, when not empty, makes authentication mandatory: each user gets
	// the permissions of its role.
	Users []User
	// ServerName names the server (default "countersign").
	ServerName string
	// Durables are durable consumers to protect besides Durables, such as
	// the audit sinks' (audit-sink-<name>, named by the configuration):
	// no role but the owner may create, change or acknowledge them.
	Durables []Durable
	// Logger receives the server's log lines at debug level and the async
	// errors (such as permission violations) of connections made by Connect.
	// Without it the server does not log and async errors go to slog.Default().
	Logger *slog.Logger
}

// User is a NATS user of the embedded server, acting in one role.
type User struct {
	Name     string
	Password string
	Role     Role
}

// Server is a running embedded nats-server.
type Server struct {
	cfg  Config
	ns   *server.Server
	log  *slog.Logger // for async connection errors; never nil
	once sync.Once
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := cfg.options()
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: configure nats server: %w", err)
	}
	logs := &serverLog{log: cfg.Logger}
	ns.SetLogger(logs, false, false)
	go ns.Start()

	deadline := time.Now().Add(readyTimeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		if fatal := logs.fatal(); fatal != "" {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embedded: nats server failed to start: %s", fatal)
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embedded: nats server not ready for connections within %s", readyTimeout)
		}
	}
	if fatal := logs.fatal(); fatal != "" {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded: nats server failed to start: %s", fatal)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, errors.New("embedded: nats server started without JetStream")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, ns: ns, log: log}, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.StoreDir == "" {
		errs = append(errs, errors.New("embedded: Config.StoreDir is required"))
	}
	if c.Port < -1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("embedded: Config.Port must be -1 (random), 0 (4222) or a port number, got %d", c.Port))
	}
	seen := make(map[string]bool, len(c.Users))
	for i, u := range c.Users {
		switch {
		case u.Name == "":
			errs = append(errs, fmt.Errorf("embedded: Config.Users[%d]: name is required", i))
		case seen[u.Name]:
			errs = append(errs, fmt.Errorf("embedded: Config.Users[%d]: duplicate user %q", i, u.Name))
		}
		seen[u.Name] = true
		if u.Password == "" {
			errs = append(errs, fmt.Errorf("embedded: Config.Users[%d] (%s): password is required", i, u.Name))
		}
		if !u.Role.Valid() {
			errs = append(errs, fmt.Errorf("embedded: Config.Users[%d] (%s): unknown role %q", i, u.Name, u.Role))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) options() *server.Options {
	host := c.Host
	if host == "" {
		host = "127.0.0.1"
	}
	name := c.ServerName
	if name == "" {
		name = "countersign"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       c.Port,
		DontListen: c.NoListen,
		JetStream:  true,
		StoreDir:   c.StoreDir,
		SyncAlways: c.SyncAlways,
		NoLog:      true, // logging goes through serverLog only
		NoSigs:     true, // the host process owns signal handling
	}
	for _, u := range c.Users {
		opts.Users = append(opts.Users, &server.User{
			Username:    u.Name,
			Password:    u.Password,
			Permissions: PermissionsWith(u.Role, c.Durables),
		})
	}
	return opts
}

// ClientURL is the nats:// URL of the TCP listener, or "" without one.
func (s *Server) ClientURL() string {
	if s.cfg.NoListen {
		return ""
	}
	return s.ns.ClientURL()
}

// NATS returns the underlying server.
func (s *Server) NATS() *server.Server { return s.ns }

// Connect opens an in-process connection as user (ignored when the server
// has no users). opts apply on top of Countersign's defaults; an
// ErrorHandler among them still runs, after the async error has been logged.
func (s *Server) Connect(user User, opts ...nats.Option) (*nats.Conn, error) {
	if len(s.cfg.Users) > 0 && !s.known(user) {
		// Checked here: an in-process connection refused by the server only
		// fails after the server's write deadline, with an unclear error.
		return nil, fmt.Errorf("embedded: connect as %q: %w", user.Name, ErrAuthentication)
	}
	o := nats.GetDefaultOptions()
	if user.Role != "" {
		o.Name = "countersign-" + string(user.Role)
		o.InboxPrefix = InboxPrefix(user.Role)
	}
	if len(s.cfg.Users) > 0 {
		o.User, o.Password = user.Name, user.Password
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("embedded: connect as %q: %w", user.Name, err)
		}
	}
	o.InProcessServer = s.ns
	next := o.AsyncErrorCB
	log, name := s.log, user.Name
	o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
		attrs := []any{"user", name, "err", err}
		if sub != nil {
			attrs = append(attrs, "subject", sub.Subject)
		}
		log.Warn("nats async error", attrs...)
		if next != nil {
			next(nc, sub, err)
		}
	}
	nc, err := o.Connect()
	if err != nil {
		if len(s.cfg.Users) > 0 {
			return nil, fmt.Errorf("embedded: connect as %q: %w", user.Name, err)
		}
		return nil, fmt.Errorf("embedded: connect: %w", err)
	}
	return nc, nil
}

// ErrAuthentication is returned by Connect for a user name and password
// that the server does not know.
var ErrAuthentication = errors.New("unknown user or wrong password")

// known reports whether u names a configured user with its password.
func (s *Server) known(u User) bool {
	for _, c := range s.cfg.Users {
		if c.Name == u.Name {
			return subtle.ConstantTimeCompare([]byte(c.Password), []byte(u.Password)) == 1
		}
	}
	return false
}

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// serverLog passes server log lines to an optional slog.Logger at debug
// level and remembers the first fatal error, so Start can report it.
type serverLog struct {
	log *slog.Logger

	mu        sync.Mutex
	fatalLine string
}

func (l *serverLog) emit(level, format string, v []any) string {
	line := strings.TrimSpace(fmt.Sprintf(format, v...))
	if l.log != nil {
		l.log.Debug(line, "component", "nats-server", "nats_level", level)
	}
	return line
}

func (l *serverLog) Noticef(format string, v ...any) { l.emit("notice", format, v) }
func (l *serverLog) Warnf(format string, v ...any)   { l.emit("warn", format, v) }
func (l *serverLog) Errorf(format string, v ...any)  { l.emit("error", format, v) }
func (l *serverLog) Debugf(format string, v ...any)  { l.emit("debug", format, v) }
func (l *serverLog) Tracef(format string, v ...any)  { l.emit("trace", format, v) }

// Fatalf records the error; unlike the server's own logger it never exits
// the process.
func (l *serverLog) Fatalf(format string, v ...any) {
	line := l.emit("fatal", format, v)
	l.mu.Lock()
	if l.fatalLine == "" {
		l.fatalLine = line
	}
	l.mu.Unlock()
}

func (l *serverLog) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalLine
}

// FreePort returns a loopback TCP port that was free a moment ago, for
// servers that need their port before they start (cluster routes, tests).
// Another process may take it in between; callers that can should listen
// on port 0 instead.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Package smtptest runs a real SMTP server for tests: it listens on a
// loopback TCP port, speaks SMTP (optionally with STARTTLS or implicit TLS
// and AUTH PLAIN), keeps every message it accepts, and can be told to refuse
// the next transactions with a chosen reply code.
//
//	srv := smtptest.Start(t, smtptest.WithSTARTTLS(), smtptest.WithAuth("u", "p"))
//	host, port := srv.Addr()
//	// ... send mail to host:port, trusting srv.RootCAs() ...
//	msg, err := srv.Next(ctx)
//	content, err := msg.Content() // decoded subject, text/plain and text/html parts
package smtptest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Domain is the name the server greets with and its certificate's DNS name.
const Domain = "localhost"

// Option configures a Server.
type Option func(*options)

type options struct {
	user, pass  string
	startTLS    bool
	implicitTLS bool
}

// WithAuth requires AUTH PLAIN with user and pass before MAIL. Over a
// connection without TLS the server only offers AUTH when no TLS option is
// given.
func WithAuth(user, pass string) Option {
	return func(o *options) { o.user, o.pass = user, pass }
}

// WithSTARTTLS offers STARTTLS with a self-signed certificate for
// 127.0.0.1, ::1 and localhost; clients trust RootCAs.
func WithSTARTTLS() Option { return func(o *options) { o.startTLS = true } }

// WithImplicitTLS speaks TLS from the first byte (SMTPS) with the same
// certificate as WithSTARTTLS.
func WithImplicitTLS() Option { return func(o *options) { o.implicitTLS = true } }

// Server is a running SMTP server. Its methods are safe for concurrent use.
type Server struct {
	opts  options
	srv   *smtp.Server
	host  string
	port  int
	roots *x509.CertPool

	stop     func()
	stopOnce sync.Once

	mu       sync.Mutex
	messages []Message
	next     int           // index of the message Next returns next
	arrived  chan struct{} // closed and replaced when a message arrives
	failN    int
	failErr  *smtp.SMTPError
}

// Start starts a server on 127.0.0.1 with a free port; t.Cleanup stops it.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{arrived: make(chan struct{})}
	for _, o := range opts {
		o(&s.opts)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtptest: listen: %v", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	s.host, s.port = addr.IP.String(), addr.Port

	s.srv = smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{srv: s, conn: c}, nil
	}))
	s.srv.Domain = Domain
	s.srv.ReadTimeout = 30 * time.Second
	s.srv.WriteTimeout = 30 * time.Second
	s.srv.MaxMessageBytes = 10 << 20
	s.srv.MaxRecipients = 50
	s.srv.ErrorLog = log.New(io.Discard, "", 0)
	if s.opts.startTLS || s.opts.implicitTLS {
		cfg, roots, err := selfSigned()
		if err != nil {
			ln.Close()
			t.Fatalf("smtptest: certificate: %v", err)
		}
		s.roots = roots
		if s.opts.implicitTLS {
			ln = tls.NewListener(ln, cfg)
		} else {
			s.srv.TLSConfig = cfg
		}
	} else {
		// Without TLS there is nothing to protect the password with; this
		// is a test server on loopback.
		s.srv.AllowInsecureAuth = true
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(ln)
	}()
	s.stop = func() {
		_ = s.srv.Close()
		// Close only closes listeners Serve has registered; this one may
		// not be yet.
		_ = ln.Close()
		<-done
	}
	t.Cleanup(s.Close)
	return s
}

// Close stops the server: from then on connections to its port are
// refused, as when the mail server is down. It is called when the test ends
// too.
func (s *Server) Close() { s.stopOnce.Do(s.stop) }

// Addr is where the server listens: host "127.0.0.1" and its port.
func (s *Server) Addr() (host string, port int) { return s.host, s.port }

// RootCAs trusts the server's certificate; nil without a TLS option.
func (s *Server) RootCAs() *x509.CertPool { return s.roots }

// Messages returns every message accepted so far, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	for i, m := range s.messages {
		out[i] = m.clone()
	}
	return out
}

// Next returns the oldest message not yet returned by Next, waiting for one
// to arrive until ctx is done.
func (s *Server) Next(ctx context.Context) (Message, error) {
	for {
		s.mu.Lock()
		if s.next < len(s.messages) {
			m := s.messages[s.next].clone()
			s.next++
			s.mu.Unlock()
			return m, nil
		}
		arrived := s.arrived
		s.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

// FailNext makes the next n mail transactions fail: every RCPT of each is
// answered with code and msg, e.g. 451 (try again later) or 550 (no such
// user), so no message is accepted. It replaces earlier FailNext calls.
func (s *Server) FailNext(n int, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN = n
	s.failErr = &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCodeNotSet, Message: msg}
}

// takeFailure returns the refusal for a transaction, or nil.
func (s *Server) takeFailure() *smtp.SMTPError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failN <= 0 {
		return nil
	}
	s.failN--
	return s.failErr
}

func (s *Server) deliver(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages = append(s.messages, m)
	close(s.arrived)
	s.arrived = make(chan struct{})
}

// session is one SMTP connection.
type session struct {
	srv    *Server
	conn   *smtp.Conn
	user   string
	from   string
	to     []string
	refuse *smtp.SMTPError // the refusal of this transaction (FailNext)
}

var _ smtp.AuthSession = (*session)(nil)

func (s *session) AuthMechanisms() []string {
	if s.srv.opts.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || s.srv.opts.user == "" {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.srv.opts.user || password != s.srv.opts.pass || (identity != "" && identity != username) {
			return smtp.ErrAuthFailed
		}
		s.user = username
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.srv.opts.user != "" && s.user == "" {
		return smtp.ErrAuthRequired
	}
	s.from, s.to, s.refuse = from, nil, nil
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.srv.opts.user != "" && s.user == "" {
		return smtp.ErrAuthRequired
	}
	if s.refuse == nil && len(s.to) == 0 {
		s.refuse = s.srv.takeFailure()
	}
	if s.refuse != nil {
		return s.refuse
	}
	s.to = append(s.to, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	_, tlsOn := s.conn.TLSConnectionState()
	s.srv.deliver(Message{
		From: s.from, To: append([]string(nil), s.to...), Data: data,
		Helo: s.conn.Hostname(), TLS: tlsOn, User: s.user,
	})
	return nil
}

func (s *session) Reset() { s.from, s.to, s.refuse = "", nil, nil }

func (s *session) Logout() error { return nil }

// selfSigned makes a certificate for the loopback addresses and a pool that
// trusts it.
func selfSigned() (*tls.Config, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "smtptest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{Domain},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if cert == nil {
		return nil, nil, errors.New("no certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, pool, nil
}

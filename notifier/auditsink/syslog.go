package auditsink

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts/audit"
)

// Syslog facility and severities of the messages: log audit (13);
// informational, or notice for a refusal.
const (
	facilityLogAudit = 13
	severityInfo     = 6
	severityNotice   = 5
)

// syslogSink writes RFC 5424 messages with RFC 5425 octet counting over one
// TLS connection, dialled again after a failure. RFC 5425 has no
// acknowledgment: an entry counts as accepted once its message is written
// to the connection.
type syslogSink struct {
	s        *Sink
	addr     string
	tls      *tls.Config
	now      func() time.Time
	hostname string

	mu   sync.Mutex
	conn *tls.Conn
}

func newSyslogSink(s *Sink, now func() time.Time) (*syslogSink, error) {
	u, err := url.Parse(s.Syslog)
	if err != nil {
		return nil, err
	}
	cfg, err := s.tlsConfig(u.Hostname())
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &syslogSink{s: s, addr: u.Host, tls: cfg, now: now, hostname: printable(host, 255)}, nil
}

func (y *syslogSink) deliver(ctx context.Context, _ audit.Pos, e *audit.Entry, body []byte) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.conn == nil {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: y.s.Timeout}, Config: y.tls}
		c, err := d.DialContext(ctx, "tcp", y.addr)
		if err != nil {
			return fmt.Errorf("syslog sink %s: %w", y.s.Name, err)
		}
		y.conn = c.(*tls.Conn)
	}
	msg := Message(e, body, y.hostname, y.now())
	_ = y.conn.SetWriteDeadline(time.Now().Add(y.s.Timeout))
	if _, err := y.conn.Write(Frame(msg)); err != nil {
		y.conn.Close()
		y.conn = nil
		return fmt.Errorf("syslog sink %s: %w", y.s.Name, err)
	}
	return nil
}

func (y *syslogSink) close() {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.conn != nil {
		y.conn.Close()
		y.conn = nil
	}
}

// Message is the RFC 5424 message of an entry: facility log audit,
// APP-NAME countersign, MSGID the change, no structured data, and body
// (the entry's OCSF event or native line) as the UTF-8 MSG.
func Message(e *audit.Entry, body []byte, hostname string, at time.Time) []byte {
	sev := severityInfo
	if strings.HasSuffix(e.Change, "_refused") {
		sev = severityNotice
	}
	head := fmt.Sprintf("<%d>1 %s %s countersign - %s - \xef\xbb\xbf",
		facilityLogAudit*8+sev, at.UTC().Format("2006-01-02T15:04:05.000000Z"),
		nilValue(hostname), nilValue(printable(e.Change, 32)))
	return append([]byte(head), body...)
}

// Frame is msg with RFC 5425 octet counting: its length, a space, msg.
func Frame(msg []byte) []byte {
	return append([]byte(strconv.Itoa(len(msg))+" "), msg...)
}

// printable keeps s's printable US-ASCII characters (33 to 126), at most n.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 33 && r <= 126 && b.Len() < n {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func nilValue(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

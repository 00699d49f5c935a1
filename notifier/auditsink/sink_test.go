package auditsink_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/audit/ocsf"
	"github.com/countersign/countersign/events/auditlog"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/events/eventstest"
	"github.com/countersign/countersign/notifier/auditsink"
	"github.com/countersign/countersign/notifier/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// received is what the SIEM's HTTPS endpoint accepted, by webhook-id.
type received struct {
	mu     sync.Mutex
	got    map[string]ocsf.Event
	failed bool // the first delivery is answered 503
	ch     chan string
}

func (r *received) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	key, _ := webhook.ParseSecret(secret)
	if err := webhook.Verify([][]byte{key}, req.Header, body, time.Now(), 0); err != nil || req.Header.Get("X-Api-Key") != "k1" {
		http.Error(w, "unsigned", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failed {
		r.failed = true
		w.Header().Set("Retry-After", "0")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var ev ocsf.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := req.Header.Get(webhook.HeaderID)
	r.got[id] = ev
	w.WriteHeader(http.StatusAccepted)
	r.ch <- id
}

// TestSinksDeliverEveryEntryAtLeastOnce: an HTTPS sink scoped to acme gets
// acme's entries as OCSF events, signed, after its first answer (503) is
// retried; a syslog receiver over TLS gets every entry in RFC 5425 frames
// of RFC 5424 messages; a sink that refuses everything (400) has each entry
// dead-lettered and holds back neither of the others; a restarted runner
// resumes where its durables stood.
func TestSinksDeliverEveryEntryAtLeastOnce(t *testing.T) {
	srv := eventstest.NewServer(t)
	srv.Provision(srv.JetStream())
	arb := srv.JetStreamAs(embedded.RoleArbiter)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	appendEntry := func(id, tenant string) {
		t.Helper()
		e := &audit.Entry{Change: audit.ChangeCreated, EventID: id, Tenant: tenant, By: "agent", At: time.Now()}
		if _, err := auditlog.Append(ctx, arb, e, "t:"+id); err != nil {
			t.Fatal(err)
		}
	}
	appendEntry("a1", "acme")
	appendEntry("g1", "globex")
	appendEntry("n1", "")
	appendEntry("a2", "acme")

	siem := &received{got: map[string]ocsf.Event{}, ch: make(chan string, 16)}
	https := httptest.NewTLSServer(siem)
	defer https.Close()
	refusing := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer refusing.Close()
	syslog := startSyslog(t)
	listener := srv.Connect()
	dead, err := listener.SubscribeSync(contracts.DeadLetterSubject(audit.Stream))
	if err != nil {
		t.Fatal(err)
	}
	if err := listener.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := auditsink.Config{
		JS: srv.JetStreamAs(embedded.RoleNotifier), Client: https.Client(),
		Sinks: []auditsink.Sink{
			{Name: "siem", URL: https.URL + "/ingest", Secrets: []string{secret}, Headers: map[string]string{"X-Api-Key": "k1"},
				Tenants: []string{"acme"}, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
			{Name: "refusing", URL: refusing.URL, Secrets: []string{secret}, Tenants: []string{"*"}},
			{Name: "syslog", Syslog: "tcp+tls://" + syslog.addr, CAFile: syslog.caFile, Format: auditsink.FormatNative, Tenants: []string{"*"}},
		},
	}
	stop := startRunner(t, ctx, cfg)

	want := map[string]string{auditsink.MessageID(audit.Pos{Seq: 1}): "a1", auditsink.MessageID(audit.Pos{Seq: 4}): "a2"}
	for range want {
		waitFor(t, ctx, siem.ch)
	}
	siem.mu.Lock()
	for id, ev := range siem.got {
		if want[id] != ev.Metadata.CorrelationUID || ev.Metadata.TenantUID != "acme" || ev.ClassUID != ocsf.ClassAPIActivity {
			t.Errorf("siem got %s: %+v, want the entry of %s", id, ev, want[id])
		}
	}
	siem.mu.Unlock()
	syslog.expect(t, ctx, "a1", "g1", "n1", "a2")
	for range 4 {
		m, err := dead.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("an entry the refusing sink refused was not dead-lettered: %v", err)
		}
		if c := m.Header.Get("Countersign-Dead-Letter-Consumer"); c != auditsink.DurablePrefix+"refusing" {
			t.Fatalf("dead letter of consumer %q", c)
		}
	}

	stop()
	appendEntry("a3", "acme")
	startRunner(t, ctx, cfg)
	if id := waitFor(t, ctx, siem.ch); id != auditsink.MessageID(audit.Pos{Seq: 5}) {
		t.Fatalf("after a restart the siem got %s first, want only the new entry (%s)", id, auditsink.MessageID(audit.Pos{Seq: 5}))
	}
	if line := waitFor(t, ctx, syslog.lines); !strings.Contains(string(line.msg), `"seq":5`) {
		t.Fatalf("after a restart syslog got %s first, want entry 5", line.msg)
	}

	// A batch (entries appended together, one stored message): each entry
	// goes out on its own, named by its place in the batch.
	var batch [][]byte
	for _, id := range []string{"a4", "g2", "a5"} {
		tenant := "acme"
		if id == "g2" {
			tenant = "globex"
		}
		data, err := (&audit.Entry{Change: audit.ChangeCreated, EventID: id, Tenant: tenant, By: "agent", At: time.Now()}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, data)
	}
	if _, err := arb.Publish(ctx, audit.SubjectBatch, audit.EncodeBatch(batch)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []audit.Pos{{Seq: 6, Index: 1}, {Seq: 6, Index: 3}} {
		if id := waitFor(t, ctx, siem.ch); id != auditsink.MessageID(want) {
			t.Fatalf("the siem got %s, want %s (acme's entries of the batch, in order)", id, auditsink.MessageID(want))
		}
	}
	for i := 1; i <= 3; i++ {
		if line := waitFor(t, ctx, syslog.lines); !strings.Contains(string(line.msg), fmt.Sprintf(`"seq":6,"index":%d`, i)) {
			t.Fatalf("syslog got %s, want entry 6.%d", line.msg, i)
		}
	}
}

// startRunner runs the sinks until the returned stop is called (or the
// test ends).
func startRunner(t *testing.T, ctx context.Context, cfg auditsink.Config) (stop func()) {
	t.Helper()
	r, err := auditsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := r.Run(rctx); err != nil {
			t.Error(err)
		}
	}()
	stop = func() {
		cancel()
		<-stopped
	}
	t.Cleanup(stop)
	return stop
}

func waitFor[T any](t *testing.T, ctx context.Context, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal("timed out waiting for a delivery")
	}
	var zero T
	return zero
}

// syslogLine is one message a syslog receiver read.
type syslogLine struct {
	pri, msgID string
	msg        []byte
}

type syslogServer struct {
	addr, caFile string
	lines        chan syslogLine
}

// rfc5424 matches a message's header: PRI, version 1, a timestamp, host,
// APP-NAME countersign, no PROCID, MSGID, no structured data, a BOM.
var rfc5424 = regexp.MustCompile(`^<(\d{1,3})>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \S+ countersign - (\S{1,32}) - \x{FEFF}`)

// startSyslog starts a syslog receiver over TLS with a certificate of its
// own, reading RFC 5425 frames.
func startSyslog(t *testing.T) *syslogServer {
	t.Helper()
	cert, caPEM := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &syslogServer{addr: ln.Addr().String(), caFile: filepath.Join(t.TempDir(), "ca.pem"), lines: make(chan syslogLine, 64)}
	if err := os.WriteFile(s.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.read(t, c)
		}
	}()
	return s
}

// expect waits for the native lines of the entries of ids, stored from
// sequence 1 on, each in a message of facility log audit, informational,
// whose MSGID is the change.
func (s *syslogServer) expect(t *testing.T, ctx context.Context, ids ...string) {
	t.Helper()
	for i, id := range ids {
		line := waitFor(t, ctx, s.lines)
		var l audit.Line
		if err := json.Unmarshal(line.msg, &l); err != nil || l.Seq != uint64(i+1) || !strings.Contains(string(l.Entry), `"event_id":"`+id+`"`) {
			t.Fatalf("syslog message %d: %s (%v), want entry %d of %s", i, line.msg, err, i+1, id)
		}
		if line.msgID != audit.ChangeCreated || line.pri != "110" {
			t.Fatalf("syslog header %+v: want PRI 110 (log audit, informational), MSGID created", line)
		}
	}
}

func (s *syslogServer) read(t *testing.T, c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		n, err := br.ReadString(' ')
		if err != nil {
			return
		}
		size, err := strconv.Atoi(strings.TrimSuffix(n, " "))
		if err != nil {
			t.Errorf("syslog frame length %q", n)
			return
		}
		msg := make([]byte, size)
		if _, err := io.ReadFull(br, msg); err != nil {
			return
		}
		m := rfc5424.FindSubmatchIndex(msg)
		if m == nil {
			t.Errorf("not an RFC 5424 message: %q", msg)
			return
		}
		s.lines <- syslogLine{pri: string(msg[m[2]:m[3]]), msgID: string(msg[m[4]:m[5]]), msg: msg[m[1]:]}
	}
}

// selfSigned is a certificate for 127.0.0.1 and its PEM, to trust it by.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "syslog test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestSinkConfigIsValidated: errors name the sink and field.
func TestSinkConfigIsValidated(t *testing.T) {
	for _, c := range []struct {
		sink auditsink.Sink
		want string
	}{
		{auditsink.Sink{Name: "Bad Name", URL: "https://x", Secrets: []string{secret}}, "Name"},
		{auditsink.Sink{Name: "a", URL: "https://x"}, "Secrets"},
		{auditsink.Sink{Name: "a", URL: "https://x", Syslog: "tcp+tls://h:6514", Secrets: []string{secret}}, "one of URL and Syslog"},
		{auditsink.Sink{Name: "a", Syslog: "udp://h:514"}, "Syslog"},
		{auditsink.Sink{Name: "a", Syslog: "tcp+tls://h:6514", Format: "cef"}, "Format"},
		{auditsink.Sink{Name: "a", URL: "https://x", Secrets: []string{secret}, Headers: map[string]string{"Webhook-Signature": "x"}}, "Headers"},
	} {
		_, err := auditsink.New(auditsink.Config{JS: jetstreamStub{}, Sinks: []auditsink.Sink{c.sink}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.sink, err, c.want)
		}
	}
}

// jetstreamStub stands for a connection in configs that are refused
// before any use.
type jetstreamStub struct{ jetstream.JetStream }

package smtptest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/email/smtptest"
)

const message = "From: a@example.com\r\nTo: b@example.com\r\nSubject: =?UTF-8?q?Caf=C3=A9?=\r\n" +
	"MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=XYZ\r\n\r\n" +
	"--XYZ\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" +
	"Caf=C3=A9 au lait, a long line that is soft=\r\n broken.\r\n" +
	"--XYZ\r\nContent-Type: text/html; charset=UTF-8\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
	"PHA+Q2Fmw6kgPGI+YXU8L2I+IGxhaXQ8L3A+\r\n" +
	"--XYZ--\r\n"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// dial opens a client to srv, greeting as client.example.test.
func dial(t *testing.T, srv *smtptest.Server, implicitTLS bool) *smtp.Client {
	t.Helper()
	host, port := srv.Addr()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var conn net.Conn
	var err error
	if implicitTLS {
		conn, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: srv.RootCAs(), ServerName: host})
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Hello("client.example.test"); err != nil {
		t.Fatal(err)
	}
	return c
}

// send runs one transaction and returns the first error.
func send(c *smtp.Client, from string, to []string, data string) error {
	if err := c.Mail(from); err != nil {
		return err
	}
	for _, rcpt := range to {
		if err := c.Rcpt(rcpt); err != nil {
			_ = c.Reset()
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(data)); err != nil {
		return err
	}
	return w.Close()
}

func TestServerCapturesAndDecodesMessages(t *testing.T) {
	srv := smtptest.Start(t)
	c := dial(t, srv, false)
	if err := send(c, "a@example.com", []string{"b@example.com", "c@example.com"}, message); err != nil {
		t.Fatal(err)
	}
	m, err := srv.Next(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.From != "a@example.com" || strings.Join(m.To, ",") != "b@example.com,c@example.com" || m.Helo != "client.example.test" || m.TLS || m.User != "" {
		t.Errorf("envelope %+v", m)
	}
	parsed, err := m.Parse()
	if err != nil || parsed.Header.Get("To") != "b@example.com" {
		t.Fatalf("Parse: %v, %v", parsed, err)
	}
	content, err := m.Content()
	if err != nil {
		t.Fatal(err)
	}
	if content.Subject != "Café" {
		t.Errorf("Subject %q", content.Subject)
	}
	if content.Text != "Café au lait, a long line that is soft broken." {
		t.Errorf("Text %q", content.Text)
	}
	if content.HTML != "<p>Café <b>au</b> lait</p>" {
		t.Errorf("HTML %q", content.HTML)
	}
	if all := srv.Messages(); len(all) != 1 || string(all[0].Data) != string(m.Data) {
		t.Errorf("Messages() = %d messages", len(all))
	}
}

func TestNextReturnsEachMessageOnceInOrder(t *testing.T) {
	srv := smtptest.Start(t)
	c := dial(t, srv, false)
	for _, subject := range []string{"one", "two"} {
		if err := send(c, "a@example.com", []string{"b@example.com"}, "Subject: "+subject+"\r\n\r\nbody\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "two"} {
		m, err := srv.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := m.Content(); c.Subject != want {
			t.Errorf("Next gave %q, want %q", c.Subject, want)
		}
	}
	short, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := srv.Next(short); !errors.Is(err, context.Canceled) {
		t.Errorf("Next without a message: %v, want the context's error", err)
	}
}

func TestNextWaitsForAMessage(t *testing.T) {
	srv := smtptest.Start(t)
	got := make(chan string, 1)
	go func() {
		m, err := srv.Next(ctx(t))
		if err != nil {
			got <- err.Error()
			return
		}
		c, _ := m.Content()
		got <- c.Subject
	}()
	c := dial(t, srv, false)
	if err := send(c, "a@example.com", []string{"b@example.com"}, "Subject: later\r\n\r\nbody\r\n"); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "later" {
		t.Errorf("Next gave %q", s)
	}
}

func TestFailNextRefusesTransactions(t *testing.T) {
	srv := smtptest.Start(t)
	c := dial(t, srv, false)
	srv.FailNext(2, 451, "try later")
	for i, want := range []int{451, 451} {
		err := send(c, "a@example.com", []string{"b@example.com", "c@example.com"}, message)
		var tp *textproto.Error
		if !errors.As(err, &tp) || tp.Code != want || !strings.Contains(tp.Msg, "try later") {
			t.Errorf("transaction %d: %v, want %d", i, err, want)
		}
	}
	srv.FailNext(1, 550, "no such user")
	err := send(c, "a@example.com", []string{"b@example.com"}, message)
	var tp *textproto.Error
	if !errors.As(err, &tp) || tp.Code != 550 {
		t.Errorf("after FailNext(1, 550): %v", err)
	}
	if err := send(c, "a@example.com", []string{"b@example.com"}, message); err != nil {
		t.Errorf("after the failures: %v", err)
	}
	if n := len(srv.Messages()); n != 1 {
		t.Errorf("%d messages accepted, want 1", n)
	}
}

func TestAuthIsRequired(t *testing.T) {
	srv := smtptest.Start(t, smtptest.WithAuth("user", "pass"))
	host, _ := srv.Addr()

	c := dial(t, srv, false)
	if err := send(c, "a@example.com", []string{"b@example.com"}, message); err == nil {
		t.Error("MAIL without AUTH succeeded")
	}
	c = dial(t, srv, false)
	if err := c.Auth(smtp.PlainAuth("", "user", "wrong", host)); err == nil {
		t.Error("AUTH with a wrong password succeeded")
	}
	c = dial(t, srv, false)
	if err := c.Auth(smtp.PlainAuth("", "user", "pass", host)); err != nil {
		t.Fatal(err)
	}
	if err := send(c, "a@example.com", []string{"b@example.com"}, message); err != nil {
		t.Fatal(err)
	}
	if m, err := srv.Next(ctx(t)); err != nil || m.User != "user" {
		t.Errorf("message %+v, %v, want user", m, err)
	}
}

func TestSTARTTLSWithAuth(t *testing.T) {
	srv := smtptest.Start(t, smtptest.WithSTARTTLS(), smtptest.WithAuth("user", "pass"))
	host, _ := srv.Addr()
	c := dial(t, srv, false)
	if ok, _ := c.Extension("STARTTLS"); !ok {
		t.Fatal("STARTTLS not offered")
	}
	if ok, _ := c.Extension("AUTH"); ok {
		t.Error("AUTH offered before TLS")
	}
	if err := c.StartTLS(&tls.Config{RootCAs: srv.RootCAs(), ServerName: host}); err != nil {
		t.Fatalf("STARTTLS with RootCAs: %v", err)
	}
	if err := c.Auth(smtp.PlainAuth("", "user", "pass", host)); err != nil {
		t.Fatal(err)
	}
	if err := send(c, "a@example.com", []string{"b@example.com"}, message); err != nil {
		t.Fatal(err)
	}
	if m, err := srv.Next(ctx(t)); err != nil || !m.TLS || m.User != "user" {
		t.Errorf("message %+v, %v, want TLS and user", m, err)
	}

	// Without the server's roots the certificate is not trusted.
	c = dial(t, srv, false)
	if err := c.StartTLS(&tls.Config{ServerName: host}); err == nil {
		t.Error("STARTTLS trusted the self-signed certificate without RootCAs")
	}
}

func TestImplicitTLS(t *testing.T) {
	srv := smtptest.Start(t, smtptest.WithImplicitTLS())
	c := dial(t, srv, true)
	if err := send(c, "a@example.com", []string{"b@example.com"}, message); err != nil {
		t.Fatal(err)
	}
	if m, err := srv.Next(ctx(t)); err != nil || !m.TLS {
		t.Errorf("message %+v, %v, want TLS", m, err)
	}
}

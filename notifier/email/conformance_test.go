package email_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/email/smtptest"
	"github.com/countersign/countersign/notifier/notifiertest"
)

// TestConformance runs the suite every channel passes against a real SMTP
// server, over STARTTLS with a password.
func TestConformance(t *testing.T) {
	notifiertest.TestChannel(t, notifiertest.Harness{New: conformanceSetup, Links: true})
}

// conformanceLinkKey signs the suite's personal links.
var conformanceLinkKey = []byte("countersign-conformance-link-key-0042")

func conformanceSetup(t *testing.T, env notifiertest.Env) notifiertest.Setup {
	srv := smtptest.Start(t, smtptest.WithSTARTTLS(), smtptest.WithAuth("mailer", password))
	ch := newChannel(t, srv, newLinks(t, email.Key{ID: "k1", Secret: conformanceLinkKey}), func(c *email.Config) {
		c.SMTP.TLS = email.TLSStartTLS
		c.SMTP.RootCAs = srv.RootCAs()
		c.SMTP.Username, c.SMTP.Password = "mailer", password
		c.PublicURL, c.Now, c.Logger = env.PublicURL, env.Now, env.Logger
	})
	return notifiertest.Setup{
		Channel: ch,
		Targets: [2]notifier.Target{
			aliceTarget(),
			{Channel: contracts.ChannelEmail, Address: "ops@example.com"},
		},
		Unknown:  notifier.Target{Channel: contracts.ChannelEmail, Address: "not an address", Approver: "alice"},
		Received: func() []notifiertest.Delivery { return emailDeliveries(t, srv) },
		Fail: func(permanent bool) {
			if permanent {
				srv.FailNext(1, 550, "no such user")
			} else {
				srv.FailNext(1, 451, "mailbox busy, try later")
			}
		},
		Stop: srv.Close,
		Secrets: []string{
			password, string(conformanceLinkKey),
			base64.StdEncoding.EncodeToString(conformanceLinkKey), base64.RawURLEncoding.EncodeToString(conformanceLinkKey),
		},
	}
}

// emailDeliveries are the messages the server accepted. An email is told
// apart by its Message-ID and belongs to the thread of the message it
// replies to.
func emailDeliveries(t *testing.T, srv *smtptest.Server) []notifiertest.Delivery {
	var out []notifiertest.Delivery
	for _, m := range srv.Messages() {
		c, err := m.Content()
		if err != nil {
			t.Fatalf("a message does not parse: %v\n%s", err, m.Data)
		}
		if len(m.To) != 1 {
			t.Fatalf("a message to %d recipients, want 1: %v", len(m.To), m.To)
		}
		content := []string{"Subject: " + c.Subject}
		for name, values := range c.Header {
			for _, v := range values {
				content = append(content, name+": "+v)
			}
		}
		content = append(content, c.Text, c.HTML)
		id := c.Header.Get("Message-Id")
		thread := c.Header.Get("In-Reply-To")
		if thread == "" {
			thread = id
		}
		out = append(out, notifiertest.Delivery{To: m.To[0], Key: id, Thread: thread, Content: strings.Join(content, "\n")})
	}
	return out
}

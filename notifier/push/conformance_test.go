package push_test

import (
	"net/http"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/notifier/push/pushtest"
)

// TestConformance runs the suite every channel passes against the test
// push service, which checks VAPID and decrypts every message.
func TestConformance(t *testing.T) {
	notifiertest.TestChannel(t, notifiertest.Harness{New: conformanceSetup, Links: true})
}

func conformanceSetup(t *testing.T, env notifiertest.Env) notifiertest.Setup {
	srv := pushtest.New()
	srv.Now = env.Now
	t.Cleanup(srv.Close)
	devs := &memDevices{}
	owner := map[string]string{} // subscription id to person
	for _, p := range []string{"alice", "bob"} {
		sub := srv.Subscribe()
		owner[sub.ID] = p
		devs.add(p, sub.Device(p+"-phone", "phone"))
	}
	vapid := newVAPID(t)
	ch, err := push.New(push.Config{VAPID: vapid, Devices: devs, Actions: newActions(t), PublicURL: env.PublicURL,
		AllowInsecure: true, Logger: env.Logger, Now: env.Now})
	if err != nil {
		t.Fatal(err)
	}
	target := func(p string) notifier.Target {
		return notifier.Target{Channel: contracts.ChannelPush, Address: p, Approver: p}
	}
	return notifiertest.Setup{
		Channel: ch,
		Targets: [2]notifier.Target{target("alice"), target("bob")},
		Unknown: target("nobody"),
		Received: func() []notifiertest.Delivery {
			var out []notifiertest.Delivery
			for _, m := range srv.Received() {
				msg := decode(t, m.Plaintext)
				out = append(out, notifiertest.Delivery{To: owner[m.Subscription], Key: msg.ID, Thread: msg.Tag,
					Content: string(m.Plaintext)})
			}
			return out
		},
		Fail: func(permanent bool) {
			if permanent {
				srv.AnswerNext(http.StatusBadRequest)
			} else {
				srv.AnswerNext(http.StatusServiceUnavailable)
			}
		},
		Stop:    srv.Close,
		Secrets: []string{vapid.PrivateKey(), b64s(linkSecret)},
	}
}

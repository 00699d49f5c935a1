package embedded_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

const approvalsWrite = "$KV." + contracts.BucketApprovals + "."

func TestOnlyArbiterWritesApprovals(t *testing.T) {
	e := newEnv(t)
	arb := e.connect(t, embedded.RoleArbiter)
	ctx := testContext(t, opTimeout)
	kv, err := arb.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatalf("arbiter: bind bucket: %v", err)
	}
	rev, err := kv.Create(ctx, "ev-1", []byte(`{"status":"pending"}`))
	if err != nil {
		t.Fatalf("arbiter: Create: %v", err)
	}
	if _, err := events.NewRecordWriter(arb.js).Update(ctx, "ev-1", []byte(`{"status":"approved"}`), nil, rev); err != nil {
		t.Fatalf("arbiter: Update: %v", err)
	}
	arb.noErrors(t)

	for _, r := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier} {
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			c := e.connect(t, r)
			kv, err := c.js.KeyValue(testContext(t, opTimeout), contracts.BucketApprovals)
			if err != nil {
				t.Fatalf("bind bucket: %v", err)
			}
			c.denied(t, approvalsWrite+"forged", func(ctx context.Context) error {
				_, err := kv.Create(ctx, "forged", []byte(`{"status":"approved"}`))
				return err
			})
			c.denied(t, approvalsWrite+"ev-1", func(ctx context.Context) error {
				_, err := kv.Update(ctx, "ev-1", []byte(`{"status":"rejected"}`), rev+1)
				return err
			})
			c.denied(t, approvalsWrite+"ev-1", func(ctx context.Context) error {
				_, err := c.js.Publish(ctx, approvalsWrite+"ev-1", []byte(`{}`))
				return err
			})
			c.denied(t, approvalsWrite+"ev-1", func(ctx context.Context) error {
				return kv.Delete(ctx, "ev-1")
			})
		})
	}
	t.Cleanup(func() {
		// Nothing but the arbiter's two writes reached the bucket.
		entry, err := kv.Get(context.Background(), "ev-1")
		if err != nil || string(entry.Value()) != `{"status":"approved"}` || entry.Revision() != rev+1 {
			t.Errorf("ev-1 after the attempts: %v %v", entry, err)
		}
		if _, err := kv.Get(context.Background(), "forged"); err == nil {
			t.Error("forged record exists")
		}
	})
}

func TestResolverPublishesOnlyVotes(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, embedded.RoleResolver)
	ctx := testContext(t, opTimeout)
	if _, err := c.js.Publish(ctx, contracts.ResolvedSubject("x"), []byte(`{}`)); err != nil {
		t.Fatalf("publish vote: %v", err)
	}
	c.noErrors(t)
	for _, subj := range []string{
		contracts.ToolRequestedSubject("a"),
		contracts.InputRequestedSubject("a"),
		contracts.CommandSubject("x"),
		contracts.DecidedSubject("x"),
		contracts.ChangedSubject("x"),
		contracts.SubjectNotifyPrefix + "slack.x",
		contracts.DeadLetterSubject(contracts.StreamRequests),
		"$KV." + contracts.BucketPolicy + ".default",
	} {
		c.denied(t, subj, func(ctx context.Context) error {
			_, err := c.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
}

func TestOrchestratorPublishesRequestsAndCommands(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, embedded.RoleOrchestrator)
	ctx := testContext(t, opTimeout)
	for _, subj := range []string{
		contracts.ToolRequestedSubject("a"),
		contracts.InputRequestedSubject("a"),
		contracts.CommandSubject("x"),
	} {
		if _, err := c.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
	}
	c.noErrors(t)
	for _, subj := range []string{
		contracts.ResolvedSubject("x"),
		contracts.DecidedSubject("x"),
		"$KV." + contracts.BucketPolicy + ".default",
	} {
		c.denied(t, subj, func(ctx context.Context) error {
			_, err := c.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
}

func TestReadersGetAndWatchApprovals(t *testing.T) {
	e := newEnv(t)
	arb := e.connect(t, embedded.RoleArbiter)
	ctx := testContext(t, opTimeout)
	akv, err := arb.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := akv.Create(ctx, "ev-1", []byte(`v1`)); err != nil {
		t.Fatal(err)
	}

	for _, r := range nonAdmin {
		t.Run(string(r), func(t *testing.T) {
			c := e.connect(t, r)
			ctx := testContext(t, opTimeout)
			kv, err := c.js.KeyValue(ctx, contracts.BucketApprovals)
			if err != nil {
				t.Fatalf("bind bucket: %v", err)
			}
			entry, err := kv.Get(ctx, "ev-1")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if want, _ := akv.Get(ctx, "ev-1"); want == nil || string(entry.Value()) != string(want.Value()) {
				t.Fatalf("Get = %q, want the arbiter's value", entry.Value())
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatalf("WatchAll: %v", err)
			}
			next := func() jetstream.KeyValueEntry {
				t.Helper()
				select {
				case e := <-w.Updates():
					return e
				case <-ctx.Done():
					t.Fatal("no watch update")
					return nil
				}
			}
			if got := next(); got == nil || got.Key() != "ev-1" {
				t.Fatalf("first watch entry = %v, want ev-1", got)
			}
			if got := next(); got != nil {
				t.Fatalf("want the nil marker after the initial values, got %s", got.Key())
			}
			// A change the arbiter makes reaches the watcher.
			cur, err := akv.Get(ctx, "ev-1")
			if err != nil {
				t.Fatal(err)
			}
			val := "v-" + string(r)
			if _, err := events.NewRecordWriter(arb.js).Update(ctx, "ev-1", []byte(val), nil, cur.Revision()); err != nil {
				t.Fatal(err)
			}
			if got := next(); got == nil || string(got.Value()) != val {
				t.Fatalf("watch update = %v, want %s", got, val)
			}
			// Stopping the watch deletes its consumer at once.
			start := time.Now()
			if err := w.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Stop took %s", d)
			}
			c.noErrors(t)
		})
	}
	arb.noErrors(t)
}

func TestArbiterConsumesResolutions(t *testing.T) {
	e := newEnv(t)
	res := e.connect(t, embedded.RoleResolver)
	orch := e.connect(t, embedded.RoleOrchestrator)
	arb := e.connect(t, embedded.RoleArbiter)
	ctx := testContext(t, opTimeout)
	if _, err := res.js.Publish(ctx, contracts.ResolvedSubject("ev-1"), []byte(`vote`)); err != nil {
		t.Fatal(err)
	}
	if _, err := orch.js.Publish(ctx, contracts.CommandSubject("ev-1"), []byte(`command`)); err != nil {
		t.Fatal(err)
	}
	if _, err := orch.js.Publish(ctx, contracts.ToolRequestedSubject("a"), []byte(`request`)); err != nil {
		t.Fatal(err)
	}

	cons, err := arb.js.CreateOrUpdateConsumer(ctx, contracts.StreamResolutions, jetstream.ConsumerConfig{
		Durable:        "arbiter-resolutions",
		AckPolicy:      jetstream.AckExplicitPolicy,
		FilterSubjects: []string{contracts.SubjectResolvedPrefix + ">", contracts.SubjectCommandPrefix + ">"},
	})
	if err != nil {
		t.Fatalf("arbiter: create durable on %s: %v", contracts.StreamResolutions, err)
	}
	fetchAndAck(t, cons, "vote", "command")
	// Nak and Term are allowed as well.
	if _, err := res.js.Publish(ctx, contracts.ResolvedSubject("ev-2"), []byte(`vote2`)); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.NakWithDelay(time.Millisecond); err != nil {
			t.Fatalf("nak: %v", err)
		}
	}
	batch, err = cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.Term(); err != nil {
			t.Fatalf("term: %v", err)
		}
	}
	// Acks of one consumer are handled in order: once this double ack is
	// confirmed, the term before it has been processed too.
	if _, err := res.js.Publish(ctx, contracts.ResolvedSubject("ev-3"), []byte(`vote3`)); err != nil {
		t.Fatal(err)
	}
	fetchAndAck(t, cons, "vote3")
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("consumer has %d unacked and %d pending messages, want none", info.NumAckPending, info.NumPending)
	}

	// The same on the request stream, with a single filter subject.
	reqs, err := arb.js.CreateOrUpdateConsumer(ctx, contracts.StreamRequests, jetstream.ConsumerConfig{
		Durable:       "arbiter-requests",
		AckPolicy:     jetstream.AckExplicitPolicy,
		FilterSubject: contracts.SubjectToolRequestedPrefix + ">",
	})
	if err != nil {
		t.Fatalf("arbiter: create durable on %s: %v", contracts.StreamRequests, err)
	}
	fetchAndAck(t, reqs, "request")

	// The arbiter announces outcomes and changes and dead-letters.
	for _, subj := range []string{
		contracts.DecidedSubject("ev-1"), contracts.ChangedSubject("ev-1"),
		contracts.DeadLetterSubject(contracts.StreamResolutions),
	} {
		if _, err := arb.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("arbiter: publish %s: %v", subj, err)
		}
	}
	arb.noErrors(t)

	// It cannot vote, request, or remove consumers and streams.
	for _, subj := range []string{contracts.ResolvedSubject("ev-1"), contracts.ToolRequestedSubject("a")} {
		arb.denied(t, subj, func(ctx context.Context) error {
			_, err := arb.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
	arb.denied(t, "$JS.API.CONSUMER.DELETE."+contracts.StreamResolutions+".arbiter-resolutions", func(ctx context.Context) error {
		return arb.js.DeleteConsumer(ctx, contracts.StreamResolutions, "arbiter-resolutions")
	})
}

// fetchAndAck fetches want (in order) and acknowledges each message,
// waiting for the server to confirm the ack.
func fetchAndAck(t *testing.T, cons jetstream.Consumer, want ...string) {
	t.Helper()
	batch, err := cons.Fetch(len(want), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.DoubleAck(testContext(t, opTimeout)); err != nil {
			t.Fatalf("ack %s: %v", m.Subject(), err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fetched %q, want %q", got, want)
	}
}

func TestNotifierConsumesRequestsAndEvents(t *testing.T) {
	e := newEnv(t)
	orch := e.connect(t, embedded.RoleOrchestrator)
	arb := e.connect(t, embedded.RoleArbiter)
	n := e.connect(t, embedded.RoleNotifier)
	ctx := testContext(t, opTimeout)
	if _, err := orch.js.Publish(ctx, contracts.ToolRequestedSubject("a"), []byte(`request`)); err != nil {
		t.Fatal(err)
	}
	if _, err := arb.js.Publish(ctx, contracts.DecidedSubject("ev-1"), []byte(`decided`)); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]string{contracts.StreamRequests: "request", contracts.StreamEvents: "decided"} {
		cons, err := n.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:        "notifier",
			AckPolicy:      jetstream.AckExplicitPolicy,
			FilterSubjects: []string{">"},
		})
		if err != nil {
			t.Fatalf("notifier: durable on %s: %v", stream, err)
		}
		fetchAndAck(t, cons, want)
	}
	for _, subj := range []string{
		contracts.SubjectNotifyPrefix + "slack.ev-1",
		contracts.DeadLetterSubject(contracts.StreamEvents),
	} {
		if _, err := n.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("notifier: publish %s: %v", subj, err)
		}
	}
	n.noErrors(t)

	for _, subj := range []string{contracts.DecidedSubject("ev-1"), contracts.ResolvedSubject("ev-1")} {
		n.denied(t, subj, func(ctx context.Context) error {
			_, err := n.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
	n.denied(t, "$JS.API.CONSUMER.CREATE."+contracts.StreamResolutions+".notifier", func(ctx context.Context) error {
		_, err := n.js.CreateOrUpdateConsumer(ctx, contracts.StreamResolutions, jetstream.ConsumerConfig{Durable: "notifier"})
		return err
	})
}

func TestAPIReadsEventsAndWritesPolicy(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t, opTimeout)
	// Provisioning created the policy bucket.
	arb := e.connect(t, embedded.RoleArbiter)
	for _, id := range []string{"ev-1", "ev-2"} {
		if _, err := arb.js.Publish(ctx, contracts.ChangedSubject(id), []byte(id)); err != nil {
			t.Fatal(err)
		}
	}

	api := e.connect(t, embedded.RoleAPI)
	// Ordered consumers on the event stream, as timelines and SSE use them.
	oc, err := api.js.OrderedConsumer(ctx, contracts.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.SubjectChangedPrefix + ">"},
	})
	if err != nil {
		t.Fatalf("api: ordered consumer: %v", err)
	}
	// A continuous read (Messages or Consume) keeps one consumer; repeated
	// Fetch or Next calls on an ordered consumer would each try to delete
	// the previous consumer, which the API may not do on this stream.
	it, err := oc.Messages()
	if err != nil {
		t.Fatalf("api: messages: %v", err)
	}
	var got []string
	for len(got) < 2 {
		msg, err := it.Next()
		if err != nil {
			t.Fatalf("api: next: %v", err)
		}
		got = append(got, string(msg.Data()))
	}
	it.Stop()
	if !slices.Equal(got, []string{"ev-1", "ev-2"}) {
		t.Errorf("api read %q from %s", got, contracts.StreamEvents)
	}
	stream, err := api.js.Stream(ctx, contracts.StreamEvents)
	if err != nil {
		t.Fatalf("api: stream info: %v", err)
	}
	if msg, err := stream.GetLastMsgForSubject(ctx, contracts.ChangedSubject("ev-2")); err != nil || string(msg.Data) != "ev-2" {
		t.Errorf("api: last message of ev-2: %v %v", msg, err)
	}

	// Policy: the API writes it, the orchestrator reads and watches it.
	pkv, err := api.js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Put(ctx, "current", []byte("rules")); err != nil {
		t.Fatalf("api: put policy: %v", err)
	}
	// Requests, commands and votes.
	for _, subj := range []string{
		contracts.ToolRequestedSubject("a"), contracts.CommandSubject("ev-1"), contracts.ResolvedSubject("ev-1"),
	} {
		if _, err := api.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("api: publish %s: %v", subj, err)
		}
	}
	api.noErrors(t)

	orch := e.connect(t, embedded.RoleOrchestrator)
	okv, err := orch.js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if entry, err := okv.Get(ctx, "current"); err != nil || string(entry.Value()) != "rules" {
		t.Fatalf("orchestrator: get policy: %v %v", entry, err)
	}
	w, err := okv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("orchestrator: watch policy: %v", err)
	}
	if entry := <-w.Updates(); entry == nil || string(entry.Value()) != "rules" {
		t.Fatalf("orchestrator: policy watch = %v", entry)
	}
	if err := w.Stop(); err != nil {
		t.Errorf("orchestrator: stop policy watch: %v", err)
	}
	orch.noErrors(t)

	// The orchestrator may run decision pools on HITL_EVENTS but never
	// touch the notifier's durables there.
	for _, d := range []string{"notifier-decided", "notifier-changes"} {
		subj := "$JS.API.CONSUMER.CREATE." + contracts.StreamEvents + "." + d + "." + contracts.SubjectDecidedPrefix + ">"
		orch.denied(t, subj, func(ctx context.Context) error {
			_, err := orch.js.CreateOrUpdateConsumer(ctx, contracts.StreamEvents, jetstream.ConsumerConfig{
				Durable: d, FilterSubject: contracts.SubjectDecidedPrefix + ">",
			})
			return err
		})
		ack := "$JS.ACK." + contracts.StreamEvents + "." + d + ".1.1.1.1.0"
		orch.denied(t, ack, func(ctx context.Context) error {
			_, err := orch.nc.RequestWithContext(ctx, ack, nil)
			return err
		})
	}

	// The API follows the request stream for its live feed but cannot
	// consume it (acknowledge a delivery) or announce outcomes.
	ackSubj := "$JS.ACK." + contracts.StreamRequests + ".arbiter-requests.1.1.1.1.0"
	api.denied(t, ackSubj, func(ctx context.Context) error {
		_, err := api.nc.RequestWithContext(ctx, ackSubj, nil)
		return err
	})
	api.denied(t, contracts.DecidedSubject("ev-1"), func(ctx context.Context) error {
		_, err := api.js.Publish(ctx, contracts.DecidedSubject("ev-1"), []byte(`{}`))
		return err
	})
}

// Only admin manages streams, buckets and consumers.
func TestOnlyAdminManages(t *testing.T) {
	e := newEnv(t)
	arb := e.connect(t, embedded.RoleArbiter)
	ctx := testContext(t, opTimeout)
	if _, err := arb.js.CreateOrUpdateConsumer(ctx, contracts.StreamResolutions, jetstream.ConsumerConfig{
		Durable: "arbiter-resolutions", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("roles", func(t *testing.T) {
		for _, r := range nonAdmin {
			t.Run(string(r), func(t *testing.T) {
				t.Parallel()
				deniedManagement(t, e.connect(t, r))
			})
		}
	})

	t.Run("admin", func(t *testing.T) {
		admin := e.connect(t, embedded.RoleAdmin)
		ctx := testContext(t, opTimeout)
		if err := admin.js.DeleteConsumer(ctx, contracts.StreamResolutions, "arbiter-resolutions"); err != nil {
			t.Fatalf("admin: delete consumer: %v", err)
		}
		if err := admin.js.DeleteStream(ctx, contracts.StreamDeadLetter); err != nil {
			t.Fatalf("admin: delete stream: %v", err)
		}
		admin.noErrors(t)
	})
}

func deniedManagement(t *testing.T, c *client) {
	t.Helper()
	c.denied(t, "$JS.API.STREAM.DELETE."+contracts.StreamRequests, func(ctx context.Context) error {
		return c.js.DeleteStream(ctx, contracts.StreamRequests)
	})
	c.denied(t, "$JS.API.STREAM.CREATE.ROGUE", func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ROGUE", Subjects: []string{"rogue.>"}})
		return err
	})
	c.denied(t, "$JS.API.STREAM.UPDATE."+contracts.StreamResolutions, func(ctx context.Context) error {
		_, err := c.js.UpdateStream(ctx, jetstream.StreamConfig{
			Name:     contracts.StreamResolutions,
			Subjects: []string{contracts.SubjectResolvedPrefix + ">"},
		})
		return err
	})
	c.denied(t, "$JS.API.STREAM.DELETE.KV_"+contracts.BucketApprovals, func(ctx context.Context) error {
		return c.js.DeleteKeyValue(ctx, contracts.BucketApprovals)
	})
	c.denied(t, "$JS.API.STREAM.PURGE."+contracts.StreamRequests, func(ctx context.Context) error {
		_, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+contracts.StreamRequests, nil)
		return err
	})
	c.denied(t, "$JS.API.STREAM.MSG.DELETE."+contracts.StreamRequests, func(ctx context.Context) error {
		_, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+contracts.StreamRequests, []byte(`{"seq":1}`))
		return err
	})
	c.denied(t, "$JS.API.CONSUMER.DELETE."+contracts.StreamResolutions+".arbiter-resolutions", func(ctx context.Context) error {
		return c.js.DeleteConsumer(ctx, contracts.StreamResolutions, "arbiter-resolutions")
	})
}

func TestPermissionsUnknownRoleDeniesAll(t *testing.T) {
	p := embedded.Permissions("root")
	if p == nil || p.Publish == nil || p.Subscribe == nil ||
		len(p.Publish.Allow) != 0 || len(p.Subscribe.Allow) != 0 ||
		!slices.Equal(p.Publish.Deny, []string{">"}) || !slices.Equal(p.Subscribe.Deny, []string{">"}) {
		t.Fatalf("Permissions(unknown) = %+v %+v, want everything denied", p.Publish, p.Subscribe)
	}
	// Only admin and arbiter may write approval records, and the denial is explicit.
	for _, r := range embedded.Roles {
		p := embedded.Permissions(r)
		deny := slices.Contains(p.Publish.Deny, approvalsWrite+">")
		if want := r != embedded.RoleAdmin && r != embedded.RoleArbiter; deny != want {
			t.Errorf("%s: explicit deny of %s> = %v, want %v", r, approvalsWrite, deny, want)
		}
	}
}

// A watcher that falls behind is throttled with flow control messages it
// must answer; a reader can answer them and so never stalls.
func TestWatchFlowControl(t *testing.T) {
	e := newEnv(t)
	arb := e.connect(t, embedded.RoleArbiter)
	res := e.connect(t, embedded.RoleResolver)
	ctx := testContext(t, 60*time.Second)
	akv, err := arb.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	rkv, err := res.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 1000
	val := make([]byte, 8*1024)
	for i := range keys {
		if _, err := akv.Put(ctx, "k"+strconv.Itoa(i), val); err != nil {
			t.Fatal(err)
		}
	}
	w, err := rkv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for n := 0; n < keys; n++ {
		select {
		case entry := <-w.Updates():
			if entry == nil {
				t.Fatalf("nil marker after %d of %d entries", n, keys)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch stalled after %d of %d entries; async errors: %v", n, keys, res.errs.all())
		}
	}
	res.noErrors(t)
}

// No role may change or acknowledge another role's durable consumer, even
// on a stream where it may create consumers of its own: the API cannot
// re-filter the arbiter's requests, the notifier cannot take the
// arbiter's, the arbiter cannot take the notifier's.
func TestRolesCannotTouchOtherRolesDurables(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		role embedded.Role
		d    embedded.Durable
	}{
		{embedded.RoleAPI, embedded.Durable{Stream: contracts.StreamRequests, Name: "arbiter-requests"}},
		{embedded.RoleNotifier, embedded.Durable{Stream: contracts.StreamRequests, Name: "arbiter-requests"}},
		{embedded.RoleArbiter, embedded.Durable{Stream: contracts.StreamRequests, Name: "notifier"}},
		{embedded.RoleAPI, embedded.Durable{Stream: contracts.StreamEvents, Name: "notifier-decided"}},
		{embedded.RoleOrchestrator, embedded.Durable{Stream: contracts.StreamEvents, Name: "notifier-changes"}},
	} {
		cl := e.connect(t, c.role)
		subj := "$JS.API.CONSUMER.CREATE." + c.d.Stream + "." + c.d.Name
		cl.denied(t, subj, func(ctx context.Context) error {
			_, err := cl.js.CreateOrUpdateConsumer(ctx, c.d.Stream, jetstream.ConsumerConfig{Durable: c.d.Name})
			return err
		})
		ack := "$JS.ACK." + c.d.Stream + "." + c.d.Name + ".1.1.1.1.0"
		cl.denied(t, ack, func(ctx context.Context) error {
			_, err := cl.nc.RequestWithContext(ctx, ack, nil)
			return err
		})
	}
}

// Claim requests: runners (orchestrator, api) ask, the arbiter alone
// receives them and answers each once, on the asker's inbox only.
func TestOnlyTheArbiterAnswersClaimRequests(t *testing.T) {
	onlyTheArbiterAnswers(t, contracts.SubjectClaimPrefix,
		[]embedded.Role{embedded.RoleOrchestrator, embedded.RoleAPI},
		[]embedded.Role{embedded.RoleResolver, embedded.RoleNotifier})
}

// Vote requests: resolvers (resolver, api) ask, the arbiter alone receives
// them; an agent's credential never votes, by request or otherwise, nor
// does the notifier's, nor the arbiter's own.
func TestOnlyTheArbiterAnswersVoteRequests(t *testing.T) {
	onlyTheArbiterAnswers(t, contracts.SubjectVotePrefix,
		[]embedded.Role{embedded.RoleResolver, embedded.RoleAPI},
		[]embedded.Role{embedded.RoleOrchestrator, embedded.RoleNotifier, embedded.RoleArbiter})
}

// onlyTheArbiterAnswers checks the requests on prefix: the askers may send
// them and get the arbiter's answer, the others may not send them, no role
// but the arbiter may listen to them, and the arbiter answers once per
// request received, onto no other inbox.
func onlyTheArbiterAnswers(t *testing.T, prefix string, askers, others []embedded.Role) {
	t.Helper()
	e := newEnv(t)
	subject := prefix + "x"
	arb := e.connect(t, embedded.RoleArbiter)
	sub, err := arb.nc.Subscribe(prefix+"*", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := arb.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range askers {
		c := e.connect(t, r)
		reply, err := c.nc.RequestWithContext(testContext(t, opTimeout), subject, []byte("{}"))
		if err != nil || string(reply.Data) != "ok" {
			t.Fatalf("%s: request on %s: %v", r, subject, err)
		}
		c.noErrors(t)
	}
	arb.noErrors(t)
	// An asker that names another subject as the reply cannot have the
	// arbiter publish there with its rights, even where the arbiter would
	// answer anything: the answer is refused (no allow_responses), and the
	// records the purge named are all there.
	kv, err := arb.js.KeyValue(testContext(t, opTimeout), contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(testContext(t, opTimeout), "ev-1", []byte(`{"status":"pending"}`)); err != nil {
		t.Fatal(err)
	}
	purge := "$JS.API.STREAM.PURGE.KV_" + contracts.BucketApprovals
	for _, r := range askers {
		c := e.connect(t, r)
		arb.denied(t, purge, func(ctx context.Context) error {
			if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: purge, Data: []byte("{}")}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}
	if st, err := kv.Status(testContext(t, opTimeout)); err != nil || st.Values() != 1 {
		t.Fatalf("the records after the answers on %s: %v, %v", purge, st, err)
	}
	for _, r := range others {
		c := e.connect(t, r)
		c.denied(t, subject, func(ctx context.Context) error {
			_, err := c.nc.RequestWithContext(ctx, subject, []byte("{}"))
			return err
		})
	}
	for _, r := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleAPI, embedded.RoleResolver, embedded.RoleNotifier} {
		c := e.connect(t, r)
		c.denied(t, prefix+">", func(ctx context.Context) error {
			s, err := c.nc.SubscribeSync(prefix + ">")
			if err != nil {
				return err
			}
			_, err = s.NextMsgWithContext(ctx)
			return err
		})
	}
	arb.denied(t, "_INBOX.someone", func(ctx context.Context) error {
		if err := arb.nc.Publish("_INBOX.someone", []byte("forged")); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
}

// No role hears another role's replies. Every reply (a JetStream API
// answer, a KV read, a watch's delivery, a request's answer) goes to the
// asker's inbox, and each role may subscribe to its own inboxes alone: a
// resolver's credential, given to a chat bot, cannot listen for the
// receipts an agent reads, and no role can listen to every inbox.
func TestNoRoleHearsAnotherRolesReplies(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t, opTimeout)
	arb := e.connect(t, embedded.RoleArbiter)
	receipts, err := arb.js.KeyValue(ctx, contracts.BucketReceipts)
	if err != nil {
		t.Fatal(err)
	}
	const secret = `{"receipt":"a single-use bearer token"}`
	if _, err := receipts.Put(ctx, "evt-1", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	others := []embedded.Role{embedded.RoleArbiter, embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier}
	for _, r := range others {
		c := e.connect(t, r)
		// Its own inboxes: allowed (every JetStream call of the role
		// uses them: this one is a stream info).
		if _, err := c.js.AccountInfo(ctx); err != nil {
			t.Fatalf("%s: account info on its own inbox: %v", r, err)
		}
		for _, inbox := range append([]string{"_INBOX.>", "_INBOX_admin.>", ">"}, func() (s []string) {
			for _, o := range others {
				if o != r {
					s = append(s, embedded.InboxPrefix(o)+".>")
				}
			}
			return s
		}()...) {
			c.denied(t, inbox, func(ctx context.Context) error {
				s, err := c.nc.SubscribeSync(inbox)
				if err != nil {
					return err
				}
				_, err = s.NextMsgWithContext(ctx)
				return err
			})
		}
	}
	// An agent reads and watches the receipt; a resolver that tries to
	// listen on the agent's inboxes hears nothing of it.
	spy := e.connect(t, embedded.RoleResolver)
	heard := make(chan string, 16)
	for _, inbox := range []string{"_INBOX.>", embedded.InboxPrefix(embedded.RoleOrchestrator) + ".>"} {
		if _, err := spy.nc.Subscribe(inbox, func(m *nats.Msg) { heard <- string(m.Data) }); err != nil {
			t.Fatal(err)
		}
	}
	agent := e.connect(t, embedded.RoleOrchestrator)
	kv, err := agent.js.KeyValue(ctx, contracts.BucketReceipts)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := kv.Get(ctx, "evt-1"); err != nil || string(got.Value()) != secret {
		t.Fatalf("the agent's own read: %v", err)
	}
	w, err := kv.Watch(ctx, "evt-1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	if e := <-w.Updates(); e == nil || string(e.Value()) != secret {
		t.Fatalf("the agent's own watch: %v", e)
	}
	// Both subscriptions were refused, so the spy's connection holds
	// none: a round trip on it shows nothing is queued for it.
	if err := spy.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case data := <-heard:
		t.Fatalf("the resolver heard the agent's reply: %s", data)
	default:
	}
}

// The copies of record writes are the server's alone: no role may publish
// on hitl.approval.record.>, and the roles that wait may listen there.
func TestOnlyTheServerPublishesRecordCopies(t *testing.T) {
	e := newEnv(t)
	subject := contracts.RecordCopySubject("x")
	for _, r := range []embedded.Role{embedded.RoleArbiter, embedded.RoleOrchestrator, embedded.RoleResolver, embedded.RoleAPI, embedded.RoleNotifier} {
		c := e.connect(t, r)
		c.denied(t, subject, func(ctx context.Context) error {
			if err := c.nc.Publish(subject, []byte(`{}`)); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}
	for _, r := range []embedded.Role{embedded.RoleOrchestrator, embedded.RoleAPI} {
		c := e.connect(t, r)
		if _, err := c.nc.SubscribeSync(contracts.SubjectRecordPrefix + ">"); err != nil {
			t.Fatal(err)
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		c.noErrors(t)
	}
}

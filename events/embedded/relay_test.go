package embedded_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
)

// The server publishes its answer to a JetStream API request on whatever
// reply subject the requester names, with its own rights, and a stream
// stores what is published on its subjects. An attacker holding any role's
// credential names a record's key, the live directory's key or a vote's
// subject as the reply of a read, to have the server store there a copy
// of what it read: an approved record as another approval's record, an
// older directory (with a person since removed) as the live one, a vote
// the attacker wrote as a history fact. No credential gets a copy stored:
// direct gets, whose answer is the stored message itself, are refused to
// every role and served by no bucket; what a message get answers is an
// envelope, refused on a record's or the directory's key (their buckets
// take a second message on a key only as a roll-up) and, on a vote's
// subject, taken by no reader for a vote.
func TestNoCredentialHasTheServerStoreACopyOfAStoredMessage(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t, opTimeout)
	arb := e.connect(t, embedded.RoleArbiter)
	records, err := arb.js.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	const approvedID, pendingID = "11111111-1111-5111-8111-111111111111", "22222222-2222-5222-8222-222222222222"
	record := func(id, status string) []byte {
		data, err := json.Marshal(contracts.Record{Spec: contracts.SpecRecord, Status: status,
			Request: contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: id}})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	approved := record(approvedID, contracts.StatusApproved)
	if _, err := records.Create(ctx, approvedID, approved); err != nil {
		t.Fatal(err)
	}
	pendingRev, err := records.Create(ctx, pendingID, record(pendingID, contracts.StatusPending))
	if err != nil {
		t.Fatal(err)
	}
	// The directory as it was (mallory an approver) and as it is now.
	api := e.connect(t, embedded.RoleAPI)
	policy, err := api.js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	directory := func(version string, people ...string) []byte {
		doc := contracts.Directory{Spec: contracts.SpecDirectory, Version: version}
		for _, p := range people {
			doc.People = append(doc.People, contracts.DirectoryPerson{ID: p})
		}
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	oldDirRev, err := policy.Create(ctx, contracts.DirectoryKey, directory("v1", "alice", "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	liveDir := directory("v2", "alice")
	dirRev, err := events.UpdateKey(ctx, api.js, contracts.BucketPolicy, contracts.DirectoryKey, liveDir, oldDirRev)
	if err != nil {
		t.Fatal(err)
	}
	// A vote for the pending approval, written by an agent's credential as
	// a history fact.
	orch := e.connect(t, embedded.RoleOrchestrator)
	forged, err := json.Marshal(contracts.Vote{Spec: contracts.SpecVote, VoteID: "v-forged", EventID: pendingID,
		Decision: contracts.DecisionApprove, Approver: contracts.Approver{ID: "alice", Via: contracts.ViaNATS}})
	if err != nil {
		t.Fatal(err)
	}
	fact, err := orch.js.Publish(ctx, contracts.HistorySubject("", "run", "agent"), forged)
	if err != nil {
		t.Fatal(err)
	}

	recordKey := events.RecordSubject(pendingID)
	directoryKey := "$KV." + contracts.BucketPolicy + "." + contracts.DirectoryKey
	voteSubject := contracts.ResolvedSubject(pendingID)
	// The admin sees every message stored on the vote's subject from now.
	admin := e.connect(t, embedded.RoleAdmin)
	stored := map[string]chan []byte{}
	for _, target := range []struct{ stream, subject string }{
		{contracts.StreamResolutions, voteSubject},
	} {
		ch := make(chan []byte, 16)
		stored[target.subject] = ch
		cons, err := admin.js.OrderedConsumer(ctx, target.stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{target.subject}, DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { ch <- m.Data() })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
	}
	// On a record's key and the directory's the answers are published but
	// not stored: the buckets take a second message on a key only as a
	// roll-up.
	answers := make(chan *nats.Msg, 16)
	if _, err := admin.nc.ChanSubscribe(recordKey, answers); err != nil {
		t.Fatal(err)
	}
	dirAnswers := make(chan *nats.Msg, 16)
	if _, err := admin.nc.ChanSubscribe(directoryKey, dirAnswers); err != nil {
		t.Fatal(err)
	}
	if err := admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	expect := map[string]int{}
	for _, r := range nonAdmin {
		t.Run(string(r), func(t *testing.T) {
			c := e.connect(t, r)
			// Direct gets: refused to every role.
			direct := "$JS.API.DIRECT.GET." + events.RecordStream + "." + events.RecordSubject(approvedID)
			c.denied(t, direct, func(ctx context.Context) error {
				if err := c.nc.PublishMsg(&nats.Msg{Subject: direct, Reply: recordKey}); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			})
			// Message gets, where the role may make them: the answer lands
			// on the subject named, as an envelope.
			allowed := embedded.Permissions(r).Publish.Allow
			ask := func(stream string, body any, reply string) {
				t.Helper()
				if !slices.Contains(allowed, "$JS.API.STREAM.MSG.GET."+stream) {
					return
				}
				data, err := json.Marshal(body)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.STREAM.MSG.GET." + stream, Reply: reply, Data: data}); err != nil {
					t.Fatal(err)
				}
				expect[reply]++
			}
			ask(events.RecordStream, map[string]string{"last_by_subj": events.RecordSubject(approvedID)}, recordKey)
			ask("KV_"+contracts.BucketPolicy, map[string]uint64{"seq": oldDirRev}, directoryKey)
			ask(contracts.StreamHistory, map[string]uint64{"seq": fact.Sequence}, voteSubject)
			if err := c.nc.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if expect[recordKey] == 0 || expect[voteSubject] == 0 || expect[directoryKey] == 0 {
		t.Fatalf("no role read the records, the directory or the history (%v): the test proves nothing", expect)
	}
	for range expect[directoryKey] {
		select {
		case m := <-dirAnswers:
			if bytes.Contains(m.Data, []byte(`"mallory"`)) {
				t.Errorf("the server answered with the old directory itself: %s", m.Data)
			}
		case <-ctx.Done():
			t.Fatalf("%d answers published on the directory's key, want %d", len(dirAnswers), expect[directoryKey])
		}
	}
	for range expect[recordKey] {
		select {
		case m := <-answers:
			if bytes.Equal(m.Data, approved) {
				t.Errorf("the server answered with the approved record itself: %s", m.Data)
			}
		case <-ctx.Done():
			t.Fatalf("%d answers published on the record's key, want %d", len(answers), expect[recordKey])
		}
	}
	// The record is as the arbiter wrote it: its next write, behind the
	// answers in the stream's queue, finds its revision unchanged.
	rec := contracts.Record{Spec: contracts.SpecRecord, Status: contracts.StatusRejected,
		Request: contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: pendingID}}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecordWriter(arb.js).Update(ctx, pendingID, data, &rec, pendingRev); err != nil {
		t.Fatalf("the arbiter's write over the pending record's revision: %v", err)
	}
	delete(expect, recordKey)
	// The directory is as the API wrote it, at its revision: none of the
	// answers published on its key was stored.
	if e, err := policy.Get(ctx, contracts.DirectoryKey); err != nil || e.Revision() != dirRev || !bytes.Equal(e.Value(), liveDir) {
		t.Fatalf("the live directory after the answers: %v, want revision %d %s", err, dirRev, liveDir)
	}
	if _, err := events.UpdateKey(ctx, api.js, contracts.BucketPolicy, contracts.DirectoryKey, directory("v3", "alice"), dirRev); err != nil {
		t.Fatalf("the API's write over the directory's revision: %v", err)
	}
	delete(expect, directoryKey)
	// On the vote's subject each answer is stored, and none is a copy of
	// what was read, nor what a reader takes for a vote.
	for subject, n := range expect {
		for range n {
			var data []byte
			select {
			case data = <-stored[subject]:
			case <-ctx.Done():
				t.Fatalf("%s: %d answers stored, want %d", subject, len(stored[subject]), n)
			}
			var v contracts.Vote
			switch {
			case bytes.Equal(data, approved), bytes.Equal(data, forged), bytes.Contains(data, []byte(`"mallory"`)):
				t.Errorf("%s: a copy was stored: %s", subject, data)
			case subject == voteSubject && contracts.Decode(data, &v) == nil && v.Spec == contracts.SpecVote:
				t.Errorf("%s: a vote was stored: %s", subject, data)
			}
		}
	}
	// Even the admin's direct gets find no bucket that answers them.
	if _, err := admin.nc.Request("$JS.API.DIRECT.GET."+events.RecordStream+"."+events.RecordSubject(approvedID), nil, denyTimeout); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a direct get of a record: %v, want no responders", err)
	}
}

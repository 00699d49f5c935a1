package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/notifier/notifiertest"
	"github.com/countersign/countersign/services/api"
)

// noteReplica starts an API replica whose records index keeps its note in
// note; stop closes it (writing the note) and its HTTP server.
func (e *env) noteReplica(t *testing.T, note string, recent int) (url string, logs *notifiertest.Logs, stop func()) {
	t.Helper()
	cfg := e.cfg
	reg := prometheus.NewRegistry()
	logs = &notifiertest.Logs{}
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.IndexRecent, cfg.IndexSnapshot = recent, note
	cfg.Logger = logs.Logger()
	s, err := api.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			hs.Close()
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return hs.URL, logs, stop
}

// logged reports whether logs holds s.
func logged(logs *notifiertest.Logs, s string) bool { return strings.Contains(logs.String(), s) }

// A replica that stopped leaves a note of where its index stood; the next
// start on the same bucket reads the pending records it names and follows
// the bucket from the oldest decided one, instead of reading every record's
// headers, and lists
// exactly what a replica that read every header lists: records written
// since, a noted pending record decided since, a noted decided record
// deleted since, records of an earlier arbiter (no summary headers), and
// the history past the index. A note that is damaged or was written for
// another bucket is not used, and the start reads every header.
func TestARestartFromTheIndexNoteListsWhatAFullReadLists(t *testing.T) {
	e := setup(t)
	arbiterJS := e.srv.JetStreamAs(embedded.RoleArbiter)
	h := &history{t: t, e: e, w: events.NewRecordWriter(arbiterJS), created: time.Now().Add(-24 * time.Hour)}
	statuses := []string{contracts.StatusApproved, contracts.StatusRejected, contracts.StatusExpired}
	seed := func(n, offset int) {
		for i := range n {
			k := i + offset
			status := statuses[k%len(statuses)]
			if k%9 == 0 {
				status = contracts.StatusPending
			}
			h.add(status, []string{"billing", "deploys"}[k%2], "run-1", []string{"alice"}, k%17 != 3)
		}
	}
	seed(90, 0)
	const recent = 25
	note := filepath.Join(t.TempDir(), "records-index.json")

	_, firstLog, stopFirst := e.noteReplica(t, note, recent)
	if !logged(firstLog, "records index note not used") {
		t.Error("the first start found a note before any was written")
	}
	stopFirst()
	if _, err := os.Stat(note); err != nil {
		t.Fatalf("no note after the replica stopped: %v", err)
	}

	// Changes after the note.
	seed(40, 90)
	ctx := context.Background()
	decide := h.all[9] // pending when noted (k = 9), and held by the index
	entry, err := e.kv.Get(ctx, decide.Request.EventID)
	if err != nil {
		t.Fatal(err)
	}
	decide.Status = contracts.StatusApproved
	data, err := contracts.Marshal(*decide)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.w.Update(ctx, decide.Request.EventID, data, decide, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	gone := h.all[85] // decided, among the newest when noted
	kv, err := arbiterJS.KeyValue(ctx, contracts.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, gone.Request.EventID); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range h.all {
		if r != gone {
			want = append(want, r.Request.EventID)
		}
	}
	slices.Sort(want)

	fromNote, noteLog, _ := e.noteReplica(t, note, recent)
	if !logged(noteLog, "records index loaded from its note") {
		t.Fatal("the restart did not load its index from the note")
	}
	fullRead := e.replica(t, func(c *api.Config) { c.IndexRecent = recent })
	queries := []string{"", "status=pending", "status=approved", "agent=deploys&status=rejected,expired"}
	for _, q := range queries {
		e.url = fullRead
		full := e.listEvery(t, "admin", q, 11)
		e.url = fromNote
		noted := e.listEvery(t, "admin", q, 11)
		// Which decided records each holds in memory, and so the order of
		// the history past them, may differ; the records listed may not.
		if dup := duplicatesOf(noted); len(dup) > 0 {
			t.Errorf("%q: listed more than once from the note: %v", q, dup)
		}
		noted, full = slices.Sorted(slices.Values(noted)), slices.Sorted(slices.Values(full))
		if !slices.Equal(noted, full) {
			t.Errorf("%q: %d records from the note, %d from every header (missing %v, extra %v)", q, len(noted), len(full), minus(full, noted), minus(noted, full))
		}
		if q == "" && !slices.Equal(noted, want) {
			t.Errorf("listed %d records, want %d (missing %v, extra %v)", len(noted), len(want), minus(want, noted), minus(noted, want))
		}
	}

	// A note that is no use is left aside, whatever it says.
	spoil := func(name string, edit func(map[string]any) []byte) {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(note)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(note, edit(m), 0o600); err != nil {
				t.Fatal(err)
			}
			url, log, stop := e.noteReplica(t, note, recent)
			defer stop()
			if !logged(log, "records index note not used") || logged(log, "records index loaded from its note") {
				t.Fatal("a spoilt note was used")
			}
			e.url = url
			got := slices.Sorted(slices.Values(e.listEvery(t, "admin", "", 11)))
			if !slices.Equal(got, want) {
				t.Errorf("listed %d records, want %d", len(got), len(want))
			}
		})
	}
	spoil("another bucket", func(m map[string]any) []byte {
		m["stream_created"] = time.Now().Add(-time.Hour).Format(time.RFC3339Nano)
		out, _ := json.Marshal(m)
		return out
	})
	spoil("damaged", func(map[string]any) []byte { return []byte(`{"version":1,"seq":`) })
	spoil("ahead of the bucket", func(m map[string]any) []byte {
		m["seq"] = 1 << 40
		out, _ := json.Marshal(m)
		return out
	})
}

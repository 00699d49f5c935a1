package ocsf_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/audit/ocsf"
	"github.com/countersign/countersign/contracts/audit/ocsf/internal/ocsfschema"
)

var product = ocsf.Product{Name: "Countersign", VendorName: "Countersign", Version: "test"}

// entries are one of every change kind docs/audit.md lists, with the
// fields the arbiter sets on each.
func entries() []audit.Entry {
	at := time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)
	ev := "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	sum := strings.Repeat("ab", 32)
	return []audit.Entry{
		{Change: audit.ChangeCreated, EventID: ev, Tenant: "acme", Revision: 1, RecordSHA256: sum, Status: "pending", By: "billing-agent", At: at},
		{Change: audit.ChangeRequestRefused, EventID: ev, Status: "rejected", By: "billing-agent", Reason: "policy_denied", At: at},
		{Change: "vote_counted", EventID: ev, Revision: 2, RecordSHA256: sum, Status: "pending", By: "alice", Via: "web", VoteID: "v-1", At: at},
		{Change: "vote_refused", EventID: ev, Status: "pending", By: "mallory", Via: "slack", VoteID: "v-2", Reason: "wrong_tenant", At: at},
		{Change: audit.ChangeDecided, EventID: ev, Revision: 3, RecordSHA256: sum, Status: "approved", By: "alice,bob", At: at},
		{Change: audit.ChangeDecided, EventID: ev, Revision: 3, RecordSHA256: sum, Status: "expired", At: at},
		{Change: "claimed", EventID: ev, Revision: 4, RecordSHA256: sum, Status: "approved", By: "gate-1", At: at},
		{Change: "claim_refused", EventID: ev, Status: "approved", By: "gate-2", Reason: "already_claimed", At: at},
		{Change: "extended", EventID: ev, Revision: 5, Status: "pending", By: "ops", At: at},
		{Change: "extend_refused", EventID: ev, By: "ops", Reason: "terminal", At: at},
		{Change: "cancel_refused", EventID: ev, By: "ops", Reason: "terminal", At: at},
		{Change: "outcome", EventID: ev, Revision: 6, RecordSHA256: sum, Status: "approved", By: "gate-1", At: at},
		{Change: "outcome_refused", EventID: ev, By: "gate-2", Reason: "not_claimant", At: at},
		{Change: "reminded", EventID: ev, Status: "pending", Step: 1, At: at},
		{Change: "escalated", EventID: ev, Status: "pending", Step: 2, At: at},
		{Change: audit.ChangeGrantIssued, EventID: ev, GrantID: ev, Tenant: "acme", By: "alice", At: at},
		{Change: audit.ChangeGrantRevoked, GrantID: ev, By: "admin", At: at},
		{Change: audit.ChangeGrantRefused, GrantID: ev, By: "eve", Reason: "forbidden", At: at},
		{Change: audit.ChangeGrantUsed, GrantID: ev, Tenant: "acme", By: "billing-agent", RunID: "run-7", ToolCallID: "call-3", At: at},
		{Change: audit.ChangeGrantUseRefused, GrantID: ev, By: "rogue-agent", RunID: "run-8", ToolCallID: "call-4", Reason: audit.ReasonGrantUseMismatch, At: at},
		{Change: "some_future_change", EventID: ev, At: at},
	}
}

// TestEveryChangeIsAValidOCSFEvent maps one entry of every change kind and
// checks each event against the OCSF 1.8.0 schema files: attributes, types,
// enums, sibling captions, requirements, constraints and ids.
func TestEveryChangeIsAValidOCSFEvent(t *testing.T) {
	schema, err := ocsfschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries() {
		ev := ocsf.FromEntry(&e, audit.Pos{Seq: uint64(i + 1)}, product)
		data, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if problems := schema.Validate(data); len(problems) > 0 {
			t.Errorf("%s: %v\n%s", e.Change, problems, data)
		}
	}
}

// TestMapping pins the mapping docs/audit.md's table states.
func TestMapping(t *testing.T) {
	want := map[string]struct{ activity, status int }{
		audit.ChangeCreated:         {ocsf.ActivityCreate, ocsf.StatusSuccess},
		audit.ChangeRequestRefused:  {ocsf.ActivityCreate, ocsf.StatusFailure},
		"vote_counted":              {ocsf.ActivityUpdate, ocsf.StatusSuccess},
		"vote_refused":              {ocsf.ActivityUpdate, ocsf.StatusFailure},
		audit.ChangeDecided:         {ocsf.ActivityUpdate, ocsf.StatusSuccess},
		audit.ChangeGrantIssued:     {ocsf.ActivityCreate, ocsf.StatusSuccess},
		audit.ChangeGrantRevoked:    {ocsf.ActivityDelete, ocsf.StatusSuccess},
		audit.ChangeGrantRefused:    {ocsf.ActivityUpdate, ocsf.StatusFailure},
		audit.ChangeGrantUsed:       {ocsf.ActivityUpdate, ocsf.StatusSuccess},
		audit.ChangeGrantUseRefused: {ocsf.ActivityUpdate, ocsf.StatusFailure},
	}
	for i, e := range entries() {
		ev := ocsf.FromEntry(&e, audit.Pos{Seq: uint64(i + 1)}, product)
		if w, ok := want[e.Change]; ok && (ev.ActivityID != w.activity || ev.StatusID != w.status) {
			t.Errorf("%s: activity %d status %d, want %d %d", e.Change, ev.ActivityID, ev.StatusID, w.activity, w.status)
		}
		if ev.ClassUID != ocsf.ClassAPIActivity || ev.TypeUID != int64(ocsf.ClassAPIActivity)*100+int64(ev.ActivityID) {
			t.Errorf("%s: class %d type %d", e.Change, ev.ClassUID, ev.TypeUID)
		}
		if ev.Metadata.UID == "" || ev.Metadata.TenantUID != e.Tenant || ev.Time != e.At.UnixMilli() {
			t.Errorf("%s: metadata %+v time %d", e.Change, ev.Metadata, ev.Time)
		}
		if (e.Change == audit.ChangeGrantUsed || e.Change == audit.ChangeGrantUseRefused) && (ev.Actor.User == nil || ev.Actor.User.UID != e.By || ev.Actor.User.Type != "AI agent" ||
			ev.Unmapped["countersign_run_id"] != e.RunID || ev.Unmapped["countersign_tool_call_id"] != e.ToolCallID) {
			t.Errorf("grant_used: actor %+v unmapped %v, want the agent and the call it allowed", ev.Actor.User, ev.Unmapped)
		}
		if e.Reason != "" && ev.StatusCode != e.Reason {
			t.Errorf("%s: status_code %q, want the reason %q", e.Change, ev.StatusCode, e.Reason)
		}
	}
}

// TestValidatorRefusesWhatTheSchemaDoes: the validator is not lenient —
// each kind of departure from the schema is named.
func TestValidatorRefusesWhatTheSchemaDoes(t *testing.T) {
	schema, err := ocsfschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := entries()[2]
	good, _ := json.Marshal(ocsf.FromEntry(&e, audit.Pos{Seq: 3}, product))
	for name, c := range map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"unknown activity":     {func(m map[string]any) { m["activity_id"] = 7.0 }, "activity_id: 7 is not one of"},
		"sibling caption":      {func(m map[string]any) { m["activity_name"] = "Edit" }, `activity_name: Edit, want "Update"`},
		"required missing":     {func(m map[string]any) { delete(m, "api") }, "api: required by api_activity"},
		"nested required":      {func(m map[string]any) { delete(m["metadata"].(map[string]any), "version") }, "metadata.version: required"},
		"wrong type":           {func(m map[string]any) { m["time"] = "yesterday" }, "time: want an integer"},
		"unknown attribute":    {func(m map[string]any) { m["tool_arguments"] = "x" }, "tool_arguments: not an attribute"},
		"array expected":       {func(m map[string]any) { m["resources"] = map[string]any{"uid": "x"} }, "resources: want an array"},
		"constraint unmet":     {func(m map[string]any) { m["src_endpoint"] = map[string]any{"port": 1.0} }, "needs at least one of"},
		"type id inconsistent": {func(m map[string]any) { m["type_uid"] = 600301.0 }, "type_uid: 600301, want"},
		"profile not applied":  {func(m map[string]any) { m["cloud"] = map[string]any{} }, "cloud: not an attribute"},
	} {
		var m map[string]any
		_ = json.Unmarshal(good, &m)
		c.edit(m)
		data, _ := json.Marshal(m)
		var got []string
		for _, p := range schema.Validate(data) {
			got = append(got, p.Error())
		}
		if !strings.Contains(strings.Join(got, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one containing %q", name, got, c.want)
		}
	}
}

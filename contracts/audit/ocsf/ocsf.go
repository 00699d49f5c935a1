package ocsf

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/audit"
)

// SchemaVersion is the OCSF schema release the events follow.
const SchemaVersion = "1.8.0"

// The one class every entry maps to: API Activity (category Application
// Activity). A change of an approval or a grant is an authenticated
// operation on a Countersign resource.
const (
	CategoryApplication = 6
	ClassAPIActivity    = 6003
)

// Activities of API Activity (class 6003).
const (
	ActivityCreate = 1
	ActivityUpdate = 3
	ActivityDelete = 4
)

// Status, severity and user type ids of the schema.
const (
	StatusSuccess = 1
	StatusFailure = 2

	SeverityInformational = 1
	SeverityLow           = 2

	userTypeUser  = 1
	userTypeOther = 99
)

// Resource types named in resources[].type.
const (
	ResourceApproval = "approval"
	ResourceGrant    = "grant"
)

// Product names the software that reported the event.
type Product struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version,omitempty"`
}

// Event is an OCSF API Activity event.
type Event struct {
	ActivityID   int    `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	CategoryUID  int    `json:"category_uid"`
	CategoryName string `json:"category_name"`
	ClassUID     int    `json:"class_uid"`
	ClassName    string `json:"class_name"`
	TypeUID      int64  `json:"type_uid"`
	TypeName     string `json:"type_name"`
	SeverityID   int    `json:"severity_id"`
	Severity     string `json:"severity"`
	StatusID     int    `json:"status_id"`
	Status       string `json:"status"`
	// StatusCode is a refusal's reason code.
	StatusCode string `json:"status_code,omitempty"`
	// Time is when the change was made, in milliseconds since the epoch.
	Time        int64       `json:"time"`
	Message     string      `json:"message"`
	Metadata    Metadata    `json:"metadata"`
	Actor       Actor       `json:"actor"`
	API         API         `json:"api"`
	SrcEndpoint SrcEndpoint `json:"src_endpoint"`
	Resources   []Resource  `json:"resources"`
	// Unmapped holds the entry's fields the classes have no place for.
	Unmapped map[string]any `json:"unmapped,omitempty"`
}

// Metadata is the event's metadata object.
type Metadata struct {
	Version string  `json:"version"`
	Product Product `json:"product"`
	// UID is the entry's place in the log: "HITL_AUDIT:<seq>", or
	// "HITL_AUDIT:<seq>.<index>" for an entry of a batch.
	UID string `json:"uid"`
	// CorrelationUID is the approval's event id: the events of one approval.
	CorrelationUID string `json:"correlation_uid,omitempty"`
	LogName        string `json:"log_name"`
	TenantUID      string `json:"tenant_uid,omitempty"`
}

// Actor is who made the change: a person, an agent, or Countersign itself.
type Actor struct {
	User    *User  `json:"user,omitempty"`
	AppName string `json:"app_name,omitempty"`
}

// User is an approver, a command's issuer or an agent, by id.
type User struct {
	UID    string `json:"uid"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type"`
}

// API is the operation: the change's kind.
type API struct {
	Operation string `json:"operation"`
}

// SrcEndpoint is the channel the change came through (web, slack, ...).
type SrcEndpoint struct {
	SvcName string `json:"svc_name"`
}

// Resource is the approval or grant changed, with its state after the
// change: status, revision and record hash, never its contents.
type Resource struct {
	Type string         `json:"type"`
	UID  string         `json:"uid"`
	Data map[string]any `json:"data,omitempty"`
}

// FromEntry maps the entry at its place in the log to its OCSF event. The event holds
// what the entry holds (ids, who, channel, status, hashes) and nothing
// more: no arguments, comments or answers, which entries never hold.
func FromEntry(e *audit.Entry, at audit.Pos, p Product) Event {
	activity, name := activityOf(e)
	ev := Event{
		ActivityID: activity, ActivityName: name,
		CategoryUID: CategoryApplication, CategoryName: "Application Activity",
		ClassUID: ClassAPIActivity, ClassName: "API Activity",
		TypeUID: ClassAPIActivity*100 + int64(activity), TypeName: "API Activity: " + name,
		SeverityID: SeverityInformational, Severity: "Informational",
		StatusID: StatusSuccess, Status: "Success",
		Time: e.At.UnixMilli(),
		Metadata: Metadata{
			Version: SchemaVersion, Product: p, UID: audit.Stream + ":" + at.String(),
			CorrelationUID: e.EventID, LogName: audit.Stream, TenantUID: e.Tenant,
		},
		Actor:       actorOf(e),
		API:         API{Operation: e.Change},
		SrcEndpoint: SrcEndpoint{SvcName: cmp.Or(e.Via, "countersign")},
		Resources:   resourcesOf(e),
		Unmapped:    unmappedOf(e),
	}
	if refused(e) {
		ev.SeverityID, ev.Severity = SeverityLow, "Low"
		ev.StatusID, ev.Status, ev.StatusCode = StatusFailure, "Failure", e.Reason
	}
	ev.Message = messageOf(e)
	return ev
}

// Marshal is ev as one JSON line's content.
func (ev *Event) Marshal() ([]byte, error) { return json.Marshal(ev) }

// refused reports whether e records a refusal.
func refused(e *audit.Entry) bool {
	return strings.HasSuffix(e.Change, "_refused") || e.Change == audit.ChangeRequestRefused
}

// activityOf is the API Activity activity of e's change.
func activityOf(e *audit.Entry) (int, string) {
	switch e.Change {
	case audit.ChangeCreated, audit.ChangeGrantIssued, audit.ChangeRequestRefused:
		return ActivityCreate, "Create"
	case audit.ChangeGrantRevoked:
		return ActivityDelete, "Delete"
	}
	return ActivityUpdate, "Update"
}

// actorOf names who made the change: one person or agent by id, else
// Countersign (a timer's expiry, several approvers deciding together).
func actorOf(e *audit.Entry) Actor {
	if e.By == "" || strings.Contains(e.By, ",") {
		return Actor{AppName: "Countersign"}
	}
	switch e.Change {
	case audit.ChangeCreated, audit.ChangeRequestRefused, audit.ChangeGrantUsed, audit.ChangeGrantUseRefused:
		return Actor{User: &User{UID: e.By, TypeID: userTypeOther, Type: "AI agent"}}
	}
	return Actor{User: &User{UID: e.By, TypeID: userTypeUser, Type: "User"}}
}

func resourcesOf(e *audit.Entry) []Resource {
	var rs []Resource
	if e.GrantID != "" {
		rs = append(rs, Resource{Type: ResourceGrant, UID: e.GrantID})
	}
	if e.EventID != "" {
		data := map[string]any{}
		if e.Status != "" {
			data["status"] = e.Status
		}
		if e.Revision != 0 {
			data["revision"] = e.Revision
		}
		if e.RecordSHA256 != "" {
			data["record_sha256"] = e.RecordSHA256
		}
		if len(data) == 0 {
			data = nil
		}
		rs = append(rs, Resource{Type: ResourceApproval, UID: e.EventID, Data: data})
	}
	return rs
}

// unmappedOf keeps the entry's own names of what the class has no
// attribute for.
func unmappedOf(e *audit.Entry) map[string]any {
	u := map[string]any{"countersign_change": e.Change}
	if strings.Contains(e.By, ",") {
		u["countersign_by"] = strings.Split(e.By, ",")
	}
	if e.VoteID != "" {
		u["countersign_vote_id"] = e.VoteID
	}
	if e.Step != 0 {
		u["countersign_step"] = e.Step
	}
	if e.RunID != "" {
		u["countersign_run_id"] = e.RunID
	}
	if e.ToolCallID != "" {
		u["countersign_tool_call_id"] = e.ToolCallID
	}
	return u
}

func messageOf(e *audit.Entry) string {
	var b strings.Builder
	if e.GrantID != "" {
		fmt.Fprintf(&b, "grant %s: %s", e.GrantID, e.Change)
	} else {
		fmt.Fprintf(&b, "approval %s: %s", e.EventID, e.Change)
	}
	if e.By != "" {
		fmt.Fprintf(&b, " by %s", contracts.TruncateText(e.By, 200))
	}
	if e.Via != "" {
		fmt.Fprintf(&b, " via %s", e.Via)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if e.Status != "" {
		fmt.Fprintf(&b, "; status %s", e.Status)
	}
	return b.String()
}

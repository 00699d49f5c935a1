package contracts

import "time"

// SpecDirectory names the directory as every role reads it.
const SpecDirectory = "countersign.directory/v1"

// DirectoryKey is the key of the live directory in the hitl_policy bucket,
// beside the policy it is read with. Only the API role writes it (from its
// directory file and its tokens); the arbiter reads it at the moment it
// applies each vote, command and request, so every role of a split
// deployment judges by the same directory. The key holds the live
// directory only; the API replaces it with a roll-up.
const DirectoryKey = "directory"

// Directory is who may take part in approvals, and with what authority:
// every person and service the API's directory file and tokens know. A
// surface vouches for who someone is (a token, a Slack signature, an email
// link, a resolver's word); the arbiter looks up in this document what they
// may do: their tenants, groups and roles, and whether they exist at all.
type Directory struct {
	Spec string `json:"spec"`
	// Version is the hex SHA-256 of the people, as encoded here.
	Version   string            `json:"version"`
	People    []DirectoryPerson `json:"people"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// DirectoryPerson is one identity of the directory.
type DirectoryPerson struct {
	// ID is the identity votes, commands and records name.
	ID    string `json:"id"`
	Email string `json:"email,omitempty"`
	// Groups the person belongs to (names without "group:").
	Groups []string `json:"groups,omitempty"`
	// Tenants limits what the person decides and manages; empty: no limit.
	Tenants []string `json:"tenants,omitempty"`
	// Roles are every role the person's tokens hold (agent, approver,
	// admin, viewer, auditor). A person a policy names approves by being
	// named; admin lets them manage every request within their tenants.
	Roles []string `json:"roles,omitempty"`
	// Development marks the development principal that serve generates
	// when no tokens are configured: one person playing agent, approver
	// and admin on one machine, who may approve what they submitted.
	Development bool `json:"development,omitempty"`
}

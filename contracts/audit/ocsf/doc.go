// Package ocsf maps audit log entries (contracts/audit) to Open
// Cybersecurity Schema Framework events, for SIEMs that ingest OCSF.
//
// Every entry becomes one API Activity event (class 6003) of OCSF 1.8.0:
// created and grant_issued are Create, grant_revoked is Delete, every other
// change of an approval is Update; refusals have status Failure with the
// refusal's reason code as status_code. The event holds what the entry
// holds and nothing more — ids, who, the channel, the status, revision and
// record hash — so it is as confidential as the entry: no arguments,
// comments, answers or tool names. docs/audit.md has the mapping's table;
// the tests check every event against the schema's own files.
package ocsf

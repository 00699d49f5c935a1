// Package auditlog keeps Countersign's tamper-evident audit log on
// JetStream: it appends entries (contracts/audit) to the HITL_AUDIT stream,
// signs checkpoints over them, and reads the stream into an export bundle.
//
// Appends are de-duplicated by message id within the stream's duplicate
// window, so a change redelivered after a crash is logged once. Checkpoints
// are written with compare-and-set on the checkpoint subject (expected last
// subject sequence): of any number of replicas signing at once, one
// checkpoint continues the last, and the others read it and go on from
// there. The chain is a function of the stream alone, so any reader
// computes the same hashes.
package auditlog

// Package audit is the format of Countersign's tamper-evident audit log:
// its entries, the hash chain over them, the signed checkpoints, and the
// export bundle with its offline verifier.
//
// Every change of an approval record, and every grant issued, revoked or
// used, is one Entry appended by the arbiter to the HITL_AUDIT stream. An
// entry names the change, never the call's arguments, comments or answers:
// it carries the record's revision and the SHA-256 of the record's RFC 8785
// form, so whoever may read the record proves it is the one logged, and
// whoever may read only the log learns nothing the record keeps private.
//
// Entries are chained in the stream's order: the chain hash after an entry
// is SHA-256(previous chain hash || SHA-256(canonical entry) || stream
// sequence as 8 bytes big-endian), starting from 32 zero bytes. A
// Checkpoint, signed with the server's receipt key as a JWS of type
// receipt.CheckpointType, lists the entries it covers (sequence, id and
// hash each) and the chain hash before and after them; each checkpoint
// continues the one before it.
//
// Verify reads a Bundle and says which entry was altered, removed,
// reordered or inserted, by sequence number and id, and whether every
// checkpoint verifies. What it proves: the entries are the ones the holder
// of the signing key saw, in that order. What it does not: a holder of the
// key can write a different history and sign it; publishing checkpoint
// heads elsewhere (a ticket, a transparency log, a second party) is what
// pins history against that.
package audit

// Package directory is Countersign's directory of approvers: who may vote,
// under which ids, in which groups, and with which API tokens.
//
// A directory is loaded from a YAML file:
//
//	groups:                       # optional; when present, users may only name these
//	  finance: {description: "Pays suppliers"}
//	users:
//	  - id: alice                 # the approver id votes and records carry
//	    name: Alice Liddell
//	    email: alice@example.com  # looked up case-insensitively
//	    slack_user_id: U024BE7LH  # maps a verified Slack interaction to alice
//	    groups: [finance]
//	    tokens:                   # bearer tokens, stored only as SHA-256 hashes
//	      - {name: alice-laptop, sha256: "<64 hex>", roles: [approver]}
//
// Guarantees:
//   - Parsing is strict: unknown fields, wrong types, duplicate ids, emails,
//     Slack ids and token hashes are errors, each reported with its line, and
//     a file with errors never yields a directory.
//   - A Directory is immutable and safe for concurrent use. Watcher swaps
//     whole directories atomically; a reload that fails keeps the previous
//     one in force.
//   - Authenticate hashes the bearer token and compares it with every stored
//     hash in constant time, whichever matches; plaintext tokens are never
//     stored.
//   - ResolveApprovers fails closed: a group the directory does not know, or
//     that has no members, stays in the list as "group:NAME", which is
//     nobody's id, so no vote can count for it.
package directory

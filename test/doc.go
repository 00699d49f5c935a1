// Package test holds Countersign's end-to-end tests: they build the real
// countersign binary, run it as separate processes against its embedded NATS
// server on disk, kill processes with SIGKILL at awkward moments, and check
// that no request, vote or outcome is lost or duplicated.
package test

//go:build race

package approval_test

// The race detector slows the JSON-heavy checks of TestVoteInterleavings
// about tenfold and finds nothing in a single goroutine: run fewer scenarios.
func init() { propScenarios = 250 }

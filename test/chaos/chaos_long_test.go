//go:build chaos

package chaos

import (
	"flag"
	"testing"
	"time"
)

var (
	longDuration = flag.Duration("chaos.duration", 5*time.Minute, "how long load and faults run")
	longSeed     = flag.Uint64("chaos.seed", 1, "seed of the fault schedule and the votes")
	longAgents   = flag.Int("chaos.agents", 6, "concurrent agents")
)

// TestChaosLong is `make chaos`: the same harness for longer, with the
// seed and duration from flags.
func TestChaosLong(t *testing.T) {
	runChaos(t, Config{
		Seed:         *longSeed,
		Duration:     *longDuration,
		Agents:       *longAgents,
		FaultGapMin:  2 * time.Second,
		FaultGapMax:  6 * time.Second,
		QuorumChecks: true,
		Quiesce:      3 * time.Minute,
	})
}

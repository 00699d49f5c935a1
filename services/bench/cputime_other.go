//go:build !linux

package bench

import "time"

// threadCPU is not available here; policy evaluation is timed by the wall
// clock only.
func threadCPU() (time.Duration, bool) { return 0, false }

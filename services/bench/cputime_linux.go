package bench

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time the calling OS thread has used so far. The
// caller must be locked to its thread (runtime.LockOSThread).
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

//go:build !linux

package chaos

import "os/exec"

// dieWithParent needs Linux's parent-death signal; elsewhere replicas of
// an interrupted run must be stopped by hand.
func dieWithParent(*exec.Cmd) {}

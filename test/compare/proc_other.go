//go:build unix && !linux

package main

import "syscall"

// childAttr puts the dev server in a process group of its own (stop signals
// the group).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

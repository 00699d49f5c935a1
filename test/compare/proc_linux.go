package main

import "syscall"

// childAttr puts the dev server in a process group of its own (stop signals
// the group) and has the kernel kill it should this process die first.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

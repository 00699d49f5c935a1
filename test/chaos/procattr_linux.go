package chaos

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the process when the harness dies,
// so an interrupted run leaves no replicas behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

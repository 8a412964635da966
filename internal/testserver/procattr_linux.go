package testserver

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the process that started it
// dies, so a test binary killed by its -timeout leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package zkepoch_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the test binary dies, so a
// run killed by its -timeout leaves no ZooKeeper behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

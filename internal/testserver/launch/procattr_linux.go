package launch

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts cmd in a process group of its own, which Stop kills
// whole and a signal to the caller's group spares, and makes the kernel
// kill it when the process that started it dies, so that a test binary
// killed by its -timeout leaves no server behind.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// kill kills cmd's process group.
func kill(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

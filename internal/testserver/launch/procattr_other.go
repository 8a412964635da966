//go:build !linux

package launch

import "os/exec"

// setProcAttr does nothing where the kernel offers no parent-death
// signal.
func setProcAttr(*exec.Cmd) {}

// kill kills cmd's process.
func kill(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

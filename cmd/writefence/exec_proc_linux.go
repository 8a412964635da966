package main

import "syscall"

// procAttr puts the program in a process group of its own and has the
// kernel kill it (SIGKILL) if exec dies: a supervisor that is killed takes
// its program with it. Processes the program started are not killed so.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

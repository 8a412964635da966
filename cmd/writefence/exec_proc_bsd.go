//go:build unix && !linux

package main

import "syscall"

// procAttr puts the program in a process group of its own. Only Linux
// kills it when exec dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

//go:build unix

package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// forwardedSignals are the signals exec passes on to its program's
// process group; the first four also ask exec to end once the program has.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// terminatingSignal reports whether sig asks exec to end.
func terminatingSignal(sig os.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// proc is a program started by exec, leader of a process group of its
// own, so that a signal reaches everything it started.
type proc struct {
	pid    int
	done   chan struct{}
	status int // set before done is closed
}

// startProc starts path with argv (argv[0] included) and env, in a
// process group of its own; its standard streams are the ones given.
func startProc(path string, argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*proc, error) {
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr, SysProcAttr: procAttr()}
	p := &proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// On Linux the program gets SIGKILL when the thread that started
		// it ends (procAttr): keep this goroutine on its thread until the
		// program is gone, so that only exec's own death sends it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the status says how it ended
		p.status = exitStatus(cmd.ProcessState)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// exitStatus is a shell's status of an ended process: its exit code, or
// 128+n when signal n ended it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (p *proc) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the group is gone
	}
	return err
}

func (p *proc) Done() <-chan struct{} { return p.done }
func (p *proc) Status() int           { return p.status }
func (p *proc) Pid() int              { return p.pid }

// Package launch installs and starts the real servers the tests run
// against, each a process of its own on 127.0.0.1 on free ports in
// 20000-32000: testserver starts a test's own servers through it, and
// cmd/servers starts the ones a whole run shares (Shared) and installs
// them (Install). It imports the standard library alone, so that program
// builds in moments.
package launch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process is a server started by Start.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
	out    *logBuffer
	dir    string    // removed by Stop; "" for none
	quit   os.Signal // asks the process to end before Stop kills it; nil for none
	once   sync.Once
}

// Start starts cmd in a process group of its own, keeping what it
// writes, and returns once ready returns nil (polled every 50 ms). It
// fails when the process exits first or ready still fails after limit,
// with the process's output in the error. The kernel kills the process
// if the one that started it dies (its children, PostgreSQL's, follow
// their parent). Stop removes dir, unless it is "".
func Start(cmd *exec.Cmd, dir string, limit time.Duration, ready func() error) (*Process, error) {
	p := &Process{cmd: cmd, exited: make(chan struct{}), out: &logBuffer{}, dir: dir}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		p.removeDir()
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		err := errors.New("exited during start-up")
		select {
		case <-p.exited:
		default:
			if err = ready(); err == nil {
				return p, nil
			}
			if time.Now().Before(deadline) {
				continue
			}
		}
		p.Stop()
		return nil, fmt.Errorf("%s: %w; its output: %s", filepath.Base(cmd.Path), err, p.out)
	}
}

// Stop kills the process and its process group, waits for the process
// to exit and removes its directory. A process that has a quit signal is
// sent that first, and killed only if it has not exited 10 s later.
func (p *Process) Stop() {
	p.once.Do(func() {
		if p.quit != nil {
			_ = p.cmd.Process.Signal(p.quit)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
			}
		}
		select {
		case <-p.exited:
		default:
			kill(p.cmd)
			<-p.exited
		}
		p.removeDir()
	})
}

func (p *Process) removeDir() {
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// withPorts calls start with n distinct free ports until it returns a
// process, five times at most: a port free a moment ago may be taken by
// the time the server binds it.
func withPorts(n int, start func(ports []string) (*Process, error)) (*Process, []string, error) {
	var err error
	for range 5 {
		ports := make([]string, 0, n)
		for len(ports) < n {
			p := FreePort()
			if p == "" {
				return nil, nil, errors.New("no free port in 20000-32000")
			}
			if !contains(ports, p) {
				ports = append(ports, p)
			}
		}
		var p *Process
		if p, err = start(ports); err == nil {
			return p, ports, nil
		}
	}
	return nil, nil, err
}

// withPort starts a server as withPorts does, on one port, and returns it
// with its URL, http://127.0.0.1:port.
func withPort(start func(port string) (*Process, error)) (*Process, string, error) {
	p, ports, err := withPorts(1, func(ports []string) (*Process, error) { return start(ports[0]) })
	if err != nil {
		return nil, "", err
	}
	return p, "http://127.0.0.1:" + ports[0], nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// FreePort returns a loopback TCP port in 20000-32000, below Linux's
// ephemeral range, that was free a moment ago; "" when it found none.
func FreePort() string {
	for range 20 {
		port := strconv.Itoa(20000 + rand.IntN(12000))
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			continue // taken
		}
		_ = ln.Close()
		return port
	}
	return ""
}

// TempDir makes a new directory for a server's data, on tmpfs when there
// is one, so that the server's fsyncs cost nothing.
func TempDir(pattern string) (string, error) {
	parent := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		parent = "/dev/shm"
	}
	return os.MkdirTemp(parent, pattern)
}

// logBuffer keeps the first 64 KiB a server writes, for the error that
// reports its failure to start.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<16 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

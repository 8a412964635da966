package testserver

import (
	"fmt"
	"os"
	"testing"

	"github.com/writefence/writefence/internal/testserver/launch"
)

// Server is a server process a package's TestMain (or a test) started
// for itself.
type Server struct {
	Endpoint string // how its clients reach it

	p *launch.Process
}

// Stop kills the server, waits for it to exit and removes its data.
func (s *Server) Stop() { s.p.Stop() }

// StartZooKeeper starts a standalone ZooKeeper (Debian's zookeeper
// package, run by the java on PATH) on a free port in 20000-32000 with a
// fresh data directory, and returns it, with its client address
// 127.0.0.1:port, once it hands a client a session. The kernel kills it
// if the calling process dies.
func StartZooKeeper() (*Server, error) {
	p, addr, err := launch.ZooKeeper()
	if err != nil {
		return nil, err
	}
	return &Server{Endpoint: addr, p: p}, nil
}

// ZooKeeperInstalled returns why ZooKeeper cannot be started here, or nil.
func ZooKeeperInstalled() error { return launch.ZooKeeperInstalled() }

// RunMain runs the tests of the package pkg against one server for the
// whole run, which start starts, setting *endpoint to its Endpoint, and
// stops at the end. When installed reports that the server cannot run
// here, every test is skipped, with a line that names apt, the Debian
// package to install, or, when Required, the run fails. It returns the
// code for os.Exit.
func RunMain(m *testing.M, pkg, apt string, installed func() error, start func() (*Server, error), endpoint *string) int {
	if err := installed(); err != nil {
		if Required() {
			fmt.Fprintf(os.Stderr, "%s: %v but WRITEFENCE_REQUIRE_SERVERS is set (go run ./internal/testserver/cmd/servers -install installs it)\n", pkg, err)
			return 1
		}
		fmt.Printf("%s: %v: skipping the tests of this package (apt-get install %s)\n", pkg, err, apt)
		return 0
	}
	srv, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, pkg+":", err)
		return 1
	}
	defer srv.Stop()
	*endpoint = srv.Endpoint
	return m.Run()
}

package testserver

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/writefence/writefence/internal/testserver/launch"
)

// EtcdEndpoint returns the client URL of the etcd server named by the
// environment (WRITEFENCE_ETCD_ENDPOINT), e.g. http://127.0.0.1:2379.
func EtcdEndpoint(t testing.TB) string { return Env(t, "WRITEFENCE_ETCD_ENDPOINT") }

// StartEtcd starts a one-member etcd (the `etcd` binary on PATH, e.g.
// Debian's etcd-server) on free ports in 20000-32000 with a fresh data
// directory (on tmpfs when there is one, so Raft's fsyncs cost nothing)
// and the extra arguments args, and returns it once /health answers. The
// kernel kills it if the calling process dies. It takes no testing.TB so
// that a TestMain can use it; StartEtcdT is the form for one test.
func StartEtcd(args ...string) (*Server, error) {
	p, endpoint, err := launch.Etcd(args...)
	if err != nil {
		return nil, err
	}
	return &Server{Endpoint: endpoint, p: p}, nil
}

// StartEtcdT starts an etcd server of the test's own, as StartEtcd does,
// stops it when the test ends and returns its client URL. Without etcd on
// PATH the test is skipped, or fails when Required.
func StartEtcdT(t testing.TB, args ...string) string {
	t.Helper()
	needProgram(t, "etcd")
	s, err := StartEtcd(args...)
	check(t, err)
	t.Cleanup(s.Stop)
	return s.Endpoint
}

// EtcdInstalled returns why etcd cannot be started here (the etcd binary
// on PATH), or nil.
func EtcdInstalled() error {
	if _, err := exec.LookPath("etcd"); err != nil {
		return errors.New("etcd is not on PATH")
	}
	return nil
}

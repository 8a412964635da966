package testserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// EtcdEndpoint returns the client URL of the etcd server named by the
// environment (WRITEFENCE_ETCD_ENDPOINT), e.g. http://127.0.0.1:2379.
func EtcdEndpoint(t testing.TB) string { return Env(t, "WRITEFENCE_ETCD_ENDPOINT") }

// EtcdServer is an etcd process started by StartEtcd.
type EtcdServer struct {
	Endpoint string // its client URL, http://127.0.0.1:port

	cmd    *exec.Cmd
	exited chan struct{}
	dir    string
	out    *lockedWriter
	once   sync.Once
}

// StartEtcd starts a one-member etcd (the `etcd` binary on PATH, e.g.
// Debian's etcd-server) on free ports in 20000-32000 with a fresh data
// directory (on tmpfs when there is one, so Raft's fsyncs cost nothing)
// and the extra arguments args, and returns it once /health answers. The
// kernel kills it if the calling process dies. It takes no testing.TB so
// that a TestMain can use it; StartEtcdT is the form for one test.
func StartEtcd(args ...string) (*EtcdServer, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		client, peer := FreePort(), FreePort()
		if client == "" || peer == "" || client == peer {
			continue
		}
		dir, err := os.MkdirTemp(tmpfsDir(), "writefence-etcd-")
		if err != nil {
			return nil, err
		}
		clientURL, peerURL := "http://127.0.0.1:"+client, "http://127.0.0.1:"+peer
		argv := append([]string{
			"--name", "wf", "--data-dir", dir,
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "wf=" + peerURL, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "error"}, args...)
		cmd := exec.Command(bin, argv...)
		out := &lockedWriter{w: new(strings.Builder)}
		cmd.Stdout, cmd.Stderr = out, out
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &EtcdServer{Endpoint: clientURL, cmd: cmd, exited: make(chan struct{}), dir: dir, out: out}
		go func() { _ = cmd.Wait(); close(s.exited) }()
		err = s.waitHealthy(30 * time.Second)
		if err == nil {
			return s, nil
		}
		lastErr = fmt.Errorf("etcd on %s: %w; its log: %s", clientURL, err, out.String())
		s.Stop()
	}
	return nil, fmt.Errorf("could not start etcd: %w", lastErr)
}

// StartEtcdT starts an etcd server of the test's own, as StartEtcd does,
// stops it when the test ends and returns its client URL. Without etcd on
// PATH the test is skipped, or fails when Required.
func StartEtcdT(t testing.TB, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		if Required() {
			t.Fatalf("etcd is not on PATH but WRITEFENCE_REQUIRE_SERVERS is set (.ci/install-servers installs it)")
		}
		t.Skip("etcd is not on PATH")
	}
	s, err := StartEtcd(args...)
	check(t, err)
	t.Cleanup(s.Stop)
	return s.Endpoint
}

func (s *EtcdServer) waitHealthy(limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return errors.New("exited during start-up")
		default:
		}
		resp, err := hc.Get(s.Endpoint + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not healthy in time")
}

// Stop kills the server, waits for it to exit and removes its data.
func (s *EtcdServer) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		_ = os.RemoveAll(s.dir)
	})
}

func tmpfsDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// lockedWriter keeps the first 64 KiB a server logs, for the error that
// reports its failure to start.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<16 {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

package etcdepoch_test

import (
	"context"
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

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/writefence/writefence/internal/testserver"
)

// etcdEndpoint is the client URL of the etcd server TestMain started for
// the package's tests and examples.
var etcdEndpoint string

// TestMain starts one etcd server (the `etcd` binary on PATH, e.g. Debian's
// etcd-server) for the whole run and stops it at the end. Without the
// binary every test here is skipped, or the run fails when
// WRITEFENCE_REQUIRE_SERVERS is set, as .ci/run sets it.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if testserver.Required() {
			fmt.Fprintln(os.Stderr, "etcdepoch: etcd is not on PATH but WRITEFENCE_REQUIRE_SERVERS is set (.ci/install-servers installs it)")
			return 1
		}
		fmt.Println("etcdepoch: etcd is not on PATH: skipping the tests of this package (apt-get install etcd-server)")
		return 0
	}
	srv, err := startEtcd(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdepoch:", err)
		return 1
	}
	defer srv.stop()
	etcdEndpoint = srv.endpoint
	return m.Run()
}

// etcdServer is an etcd process of the test's own.
type etcdServer struct {
	endpoint string
	cmd      *exec.Cmd
	exited   chan struct{}
	dir      string
	once     sync.Once
}

// startEtcd starts a one-member etcd on free ports in 20000-32000 with a
// fresh data directory (on tmpfs when there is one, so Raft's fsyncs cost
// nothing), waits until /health answers, and returns it.
func startEtcd(bin string) (*etcdServer, error) {
	var lastErr error
	for range 5 {
		client, peer := testserver.FreePort(), testserver.FreePort()
		if client == "" || peer == "" || client == peer {
			continue
		}
		dir, err := os.MkdirTemp(tmpfsDir(), "etcdepoch-")
		if err != nil {
			return nil, err
		}
		clientURL, peerURL := "http://127.0.0.1:"+client, "http://127.0.0.1:"+peer
		cmd := exec.Command(bin,
			"--name", "wf", "--data-dir", dir,
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "wf="+peerURL, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "error")
		out := &lockedWriter{w: new(strings.Builder)}
		cmd.Stdout, cmd.Stderr = out, out
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &etcdServer{endpoint: clientURL, cmd: cmd, exited: make(chan struct{}), dir: dir}
		go func() { _ = cmd.Wait(); close(s.exited) }()
		err = s.waitHealthy(30 * time.Second)
		if err == nil {
			return s, nil
		}
		lastErr = fmt.Errorf("etcd on %s: %w; its log: %s", clientURL, err, out.String())
		s.stop()
	}
	return nil, fmt.Errorf("could not start etcd: %w", lastErr)
}

func (s *etcdServer) waitHealthy(limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return errors.New("exited during start-up")
		default:
		}
		resp, err := hc.Get(s.endpoint + "/health")
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

// stop kills the server, waits for it to exit and removes its data.
func (s *etcdServer) stop() {
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

// newClient returns a client of endpoint (a connection of its own, as a
// separate process would have), closed when the test ends.
func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newSession returns a session of cli with a lease of ttl seconds,
// closed when the test ends.
func newSession(t testing.TB, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// uniqueName returns a fresh election name, so runs never see each other's
// candidates.
func uniqueName(t testing.TB) string { return "/writefence-test/" + testserver.UniqueName(t) }

// candidate is a key in an election and its create revision.
type candidate struct {
	key string
	rev int64
}

// waitCandidates waits until the election name has at least n candidate
// keys and returns them in create order. It waits on etcd's watch events,
// never on a timer.
func waitCandidates(t testing.TB, cli *clientv3.Client, name string, n int) []candidate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, name+"/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		require.NoError(t, err)
		if len(resp.Kvs) >= n {
			out := make([]candidate, len(resp.Kvs))
			for i, kv := range resp.Kvs {
				out[i] = candidate{key: string(kv.Key), rev: kv.CreateRevision}
			}
			return out
		}
		wctx, wcancel := context.WithCancel(ctx)
		wr, ok := <-cli.Watch(wctx, name+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		wcancel()
		require.True(t, ok, "watch closed: %v", ctx.Err())
		require.NoError(t, wr.Err())
	}
}

// mintRevision returns the revision of the last write to the election's
// own key (where epochs are minted), 0 when never written.
func mintRevision(t testing.TB, cli *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), name)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

package etcdepoch_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/writefence/writefence/etcdepoch"
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
	os.Exit(testserver.RunMain(m, "etcdepoch", "etcd-server", testserver.EtcdInstalled,
		func() (*testserver.Server, error) { return testserver.StartEtcd() }, &etcdEndpoint))
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

// newCandidate returns a candidate in the election name, campaigning with a
// session (a lease of 60 s) and a client of its own, as a separate
// process would, and its session.
func newCandidate(t testing.TB, name string) (*etcdepoch.Election, *concurrency.Session) {
	t.Helper()
	s := newSession(t, newClient(t, etcdEndpoint), 60)
	return etcdepoch.NewElection(s, name), s
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

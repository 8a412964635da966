package etcdstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/etcdstore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/etcd"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
)

// The store against the etcd server named by WRITEFENCE_ETCD_ENDPOINT
// (.ci/run starts Debian's etcd 3.4), and against servers of a
// test's own for authentication and the server's request limit.

// kitReadLimit is the read limit of the conformance run: the suite checks
// that a value of exactly this size is read and one byte more refused.
const kitReadLimit = 1 << 20

// rpcCounter counts the unary RPCs a client sends, by method.
type rpcCounter struct{ total, kv atomic.Int64 }

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.total.Add(1)
	if strings.HasPrefix(method, "/etcdserverpb.KV/") {
		c.kv.Add(1)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// newClient returns a client of the shared server; with counter set it
// counts every RPC the client sends.
func newClient(t *testing.T, counter *rpcCounter) *clientv3.Client {
	t.Helper()
	return etcd.EtcdClient(t, testserver.EtcdEndpoint(t), func(cfg *clientv3.Config) {
		if counter != nil {
			cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(counter.intercept))
		}
	})
}

// newStore returns a client of the shared server, a store over a prefix
// of the test's own, and the prefix.
func newStore(t *testing.T) (*clientv3.Client, *etcdstore.Store, string) {
	t.Helper()
	c := newClient(t, nil)
	prefix := etcd.EtcdPrefix(t, c)
	return c, etcdstore.New(c, prefix), prefix
}

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

func TestConformance(t *testing.T) {
	c, store, prefix := newStore(t)
	store.MaxObjectSize = kitReadLimit
	kit.Run(t, store, etcd.DamageEtcd(c, prefix), kitReadLimit)
}

// TestProbe: the probe trusts etcd, and leaves no key behind.
func TestProbe(t *testing.T) {
	_, store, _ := newStore(t)
	kit.Probe(t, store)
}

// TestModel runs the model (internal/modeltest) on etcd, where a write
// around the store is a new mod revision.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		c, store, prefix := newStore(t)
		return modeltest.Target{Name: "etcd", Rewrites: true, Store: store, Damage: etcd.DamageEtcd(c, prefix)}
	})
}

// TestRoundTrips: a steady push (a Fence pushing consecutive epochs, its
// version cached) costs one RPC, its Txn; a push by a fresh Fence costs
// two, the Range and the Txn; Get costs one.
func TestRoundTrips(t *testing.T) {
	var counter rpcCounter
	c := newClient(t, &counter)
	store := etcdstore.New(c, etcd.EtcdPrefix(t, c))
	ctx := t.Context()
	payload := make([]byte, 1<<10)
	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, payload))

	const pushes = 50
	before := counter.total.Load()
	for e := uint64(2); e < 2+pushes; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", e, payload))
	}
	assert.Equal(t, 1.0, float64(counter.total.Load()-before)/pushes, "RPCs per steady push")

	before = counter.total.Load()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 100, payload))
	assert.EqualValues(t, 2, counter.total.Load()-before, "RPCs of a cold push")

	before = counter.total.Load()
	_, _, err := store.Get(ctx, kit.ShardKey(t, "wal", "0"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, counter.total.Load()-before, "RPCs of a Get")
	assert.Equal(t, counter.total.Load(), counter.kv.Load(), "every RPC was a KV call")
}

// TestVersionIsModRevision: the version is the key's mod revision as etcd
// reports it, and a plain Put by another client (etcdctl put) gives the key
// a new version, so a write conditioned on the old one conflicts and a
// Fence sees the foreign bytes as a corrupt record at that new version.
func TestVersionIsModRevision(t *testing.T) {
	c, store, prefix := newStore(t)
	ctx := t.Context()
	v1, err := store.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	resp, err := c.Get(ctx, prefix+"k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, strconv.FormatInt(resp.Kvs[0].ModRevision, 10), v1)

	_, err = c.Put(ctx, prefix+"k", "one")
	require.NoError(t, err)
	data, v2, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))
	assert.NotEqual(t, v1, v2, "the same bytes written again are a new version")
	_, err = store.PutIfVersion(ctx, "k", []byte("two"), v1)
	assert.ErrorIs(t, err, writefence.ErrConflict)

	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("p")))
	key := kit.ShardKey(t, "wal", "0")
	_, err = c.Put(ctx, prefix+key, "not a record")
	require.NoError(t, err)
	_, _, _, err = f.Latest(ctx, "wal", "0")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	resp, err = c.Get(ctx, prefix+key)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(resp.Kvs[0].ModRevision, 10), ce.Version)
	assert.ErrorIs(t, f.Push(ctx, "wal", "0", "w", 2, []byte("p")), writefence.ErrCorrupt, "the fence never overwrites it")
}

// TestLimits: a write over MaxRequestBytes is refused before it is sent;
// one the store lets through but the server refuses (MaxRequestBytes set
// above the server's limit) is ErrTooLarge too, and lands nowhere; a value
// over MaxObjectSize is refused by the call's own receive limit.
func TestLimits(t *testing.T) {
	var counter rpcCounter
	c := newClient(t, &counter)
	prefix := etcd.EtcdPrefix(t, c)
	store := etcdstore.New(c, prefix)
	ctx := t.Context()

	big := make([]byte, etcdstore.DefaultMaxRequestBytes)
	before := counter.total.Load()
	_, err := store.PutIfVersion(ctx, "big", big, "")
	kit.StoreError(t, err, "etcd put", "big", writefence.ErrTooLarge)
	assert.Equal(t, before, counter.total.Load(), "refused before sending")

	// The largest value that fits: the store's own bound is within a few
	// hundred bytes of the server's.
	fits := make([]byte, etcdstore.DefaultMaxRequestBytes-512)
	_, err = store.PutIfVersion(ctx, "fits", fits, "")
	require.NoError(t, err)
	data, _, err := store.Get(ctx, "fits")
	require.NoError(t, err)
	assert.Len(t, data, len(fits))

	store.MaxRequestBytes = 4 << 20
	for _, n := range []int{etcdstore.DefaultMaxRequestBytes, 3 << 20} {
		_, err = store.PutIfVersion(ctx, "over", make([]byte, n), "")
		kit.StoreError(t, err, "etcd put", "over", writefence.ErrTooLarge)
		_, _, err = store.Get(ctx, "over")
		assert.ErrorIs(t, err, writefence.ErrNotFound, "nothing landed")
	}

	store.MaxObjectSize = 64 << 10
	_, _, err = store.Get(ctx, "fits")
	kit.StoreError(t, err, "etcd get", "fits", writefence.ErrTooLarge)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "refused by the call's receive limit: %v", err)
	_, err = c.Put(ctx, prefix+"edge", string(make([]byte, 64<<10+1)))
	require.NoError(t, err)
	_, _, err = store.Get(ctx, "edge")
	kit.StoreError(t, err, "etcd get", "edge", writefence.ErrTooLarge)
}

// TestPermissions runs against an etcd of the test's own with
// authentication on: a user who may only read the prefix is refused every
// write with an error matching fs.ErrPermission that reaches etcd's own
// error and names no credential; a client with a wrong password is
// refused at connection, and its error names no credential either.
func TestPermissions(t *testing.T) {
	endpoint := testserver.StartEtcdT(t)
	ctx := t.Context()
	const rootPassword, readerPassword = "root-hunter2-secret", "reader-hunter2-secret"
	admin := etcd.EtcdClient(t, endpoint)
	_, err := admin.UserAdd(ctx, "root", rootPassword)
	require.NoError(t, err)
	_, err = admin.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)
	_, err = admin.RoleAdd(ctx, "reader")
	require.NoError(t, err)
	_, err = admin.RoleGrantPermission(ctx, "reader", "/p/", clientv3.GetPrefixRangeEnd("/p/"), clientv3.PermissionType(clientv3.PermRead))
	require.NoError(t, err)
	_, err = admin.UserAdd(ctx, "reader", readerPassword)
	require.NoError(t, err)
	_, err = admin.UserGrantRole(ctx, "reader", "reader")
	require.NoError(t, err)
	_, err = admin.AuthEnable(ctx)
	require.NoError(t, err)

	root := etcd.EtcdClient(t, endpoint, func(cfg *clientv3.Config) { cfg.Username, cfg.Password = "root", rootPassword })
	_, err = etcdstore.New(root, "/p/").PutIfVersion(ctx, "k", []byte("v"), "")
	require.NoError(t, err)

	// Every log line of the clients that hold a password, at every level.
	core, logs := observer.New(zap.DebugLevel)
	logger := zap.New(core)
	reader := etcdstore.New(etcd.EtcdClient(t, endpoint, func(cfg *clientv3.Config) {
		cfg.Username, cfg.Password, cfg.Logger = "reader", readerPassword, logger
	}), "/p/")
	data, v, err := reader.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "v", string(data))
	for name, write := range map[string]func() error{
		"create": func() error { _, err := reader.PutIfVersion(ctx, "new", []byte("x"), ""); return err },
		"update": func() error { _, err := reader.PutIfVersion(ctx, "k", []byte("x"), v); return err },
		"delete": func() error { return reader.Delete(ctx, "k") },
	} {
		err := write()
		require.ErrorIs(t, err, fs.ErrPermission, name)
		assert.NotErrorIs(t, err, writefence.ErrConflict, name)
		assert.ErrorIs(t, err, rpctypes.ErrPermissionDenied, name)
		var se *writefence.StoreError
		require.ErrorAs(t, err, &se, name)
		assert.NotContains(t, err.Error(), "hunter2", name)
	}
	_, _, err = etcdstore.New(root, "/q/").Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "root reads everywhere")

	f := &writefence.Fence{Store: reader, Prefix: "x/"}
	err = f.Push(ctx, "wal", "0", "w", 1, []byte("p"))
	require.ErrorIs(t, err, fs.ErrPermission, "a Fence does not retry a refusal")

	_, err = clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: "reader", Password: "wrong-hunter2-secret", Logger: logger})
	require.Error(t, err)
	assert.NotContains(t, fmt.Sprint(err), "hunter2")

	require.NotZero(t, logs.Len(), "the client logged the refusals")
	for _, e := range logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		assert.NotContains(t, line, "hunter2", "a log line of the client")
	}
}

// BenchmarkPush compares, for a 1 KiB payload, etcd's raw conditional
// write (a Txn If ModRevision = rev Then Put through the client, the
// floor), the store's PutIfVersion, and a steady Fence.Push (one writer
// pushing consecutive epochs, its version cached), side by side:
//
//	go test -run '^$' -bench BenchmarkPush -count 10 ./etcdstore | benchstat -col /impl -
//
// roundtrips/op counts the RPCs sent.
func BenchmarkPush(b *testing.B) {
	var counter rpcCounter
	c := etcd.EtcdClient(b, testserver.EtcdEndpoint(b), func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(counter.intercept))
	})
	prefix := etcd.EtcdPrefix(b, c)
	store := etcdstore.New(c, prefix)
	payload := string(make([]byte, 1<<10))
	for _, impl := range []string{"raw", "store", "fenced"} {
		b.Run("size=1KiB/impl="+impl, func(b *testing.B) {
			ctx := context.Background()
			key := testserver.UniqueName(b)
			version, err := store.PutIfVersion(ctx, key, []byte(payload), "")
			require.NoError(b, err)
			rev, err := strconv.ParseInt(version, 10, 64)
			require.NoError(b, err)
			fence := &writefence.Fence{Store: store, Prefix: key + "/"}
			epoch := uint64(1)
			require.NoError(b, fence.Push(ctx, "wal", "0", "w", epoch, []byte(payload)))
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			before := counter.total.Load()
			for b.Loop() {
				switch impl {
				case "raw":
					var resp *clientv3.TxnResponse
					resp, err = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefix+key), "=", rev)).
						Then(clientv3.OpPut(prefix+key, payload)).Commit()
					if err == nil && !resp.Succeeded {
						err = fmt.Errorf("raw txn at %d did not succeed", rev)
					}
					if err == nil {
						rev = resp.Header.Revision
					}
				case "store":
					version, err = store.PutIfVersion(ctx, key, []byte(payload), version)
				case "fenced":
					epoch++
					err = fence.Push(ctx, "wal", "0", "w", epoch, []byte(payload))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.total.Load()-before)/float64(b.N), "roundtrips/op")
		})
	}
}

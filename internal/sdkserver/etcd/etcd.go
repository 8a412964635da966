// Package etcd reaches the etcd servers the etcd tests run against
// through the etcd client, beside package testserver (which starts them),
// so that only the modules that test on etcd link the client.
package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/writefence/writefence/internal/testserver"
)

// EtcdClient returns a client of endpoint, a connection of its own as a
// separate process would have, closed when the test ends. configure, when
// given, changes the configuration first (credentials, dial options).
func EtcdClient(t testing.TB, endpoint string, configure ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	for _, f := range configure {
		f(&cfg)
	}
	c, err := clientv3.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// EtcdPrefix returns a fresh key prefix for a test's keys on c's cluster
// and deletes every key under it when the test ends.
func EtcdPrefix(t testing.TB, c *clientv3.Client) string {
	t.Helper()
	prefix := "/" + testserver.UniqueName(t) + "/"
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		if _, err := c.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			t.Errorf("cleanup: delete %s: %v", prefix, err)
		}
	})
	return prefix
}

// DamageEtcd damages the values of an etcd store whose keys live under
// prefix on c by writing the damaged bytes over them with a plain Put, as
// etcdctl put or another program would: the key gets a new mod revision,
// which is the store's version.
func DamageEtcd(c *clientv3.Client, prefix string) testserver.Damager {
	return func(ctx context.Context, key string, f testserver.Fault) error {
		resp, err := c.Get(ctx, prefix+key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("damage %s: no such key", key)
		}
		_, err = c.Put(ctx, prefix+key, string(f.Apply(resp.Kvs[0].Value)))
		return err
	}
}

//go:build !writefence_noetcd && !writefence_nosdk

package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/writefence/writefence/internal/sdkserver/etcd"
	"github.com/writefence/writefence/internal/testserver"
)

// TestEtcdAddress: the forms of an etcd address, and the malformed ones,
// refused as usage errors before any I/O, echoing no secret.
func TestEtcdAddress(t *testing.T) {
	t.Setenv("ETCDCTL_USER", "")
	assertOpens(t, "*etcdstore.Store",
		"etcd://127.0.0.1:1/mirrors",
		"etcd://127.0.0.1:1",
		"etcd://127.0.0.1:1/a/b/?max-request-bytes=10485760",
		"etcds://127.0.0.1:1/mirrors",
		"etcd://127.0.0.1:1/mirrors?tls=true",
	)
	assertRefused(t,
		"etcd://",
		"etcd://127.0.0.1/mirrors",
		"etcd://127.0.0.1:1/m?max-request-bytes=-1",
		"etcd://127.0.0.1:1/m?max-request-bytes=lots",
		"etcd://127.0.0.1:1/m?prefix=x",
		"etcds://127.0.0.1:1/m?tls=false",
		"etcd://root:hunter2secret@127.0.0.1:1/m",
	)
}

// etcdAddress returns the address of the shared etcd server with a prefix
// of the test's own, deleted afterwards.
func etcdAddress(t *testing.T) string {
	endpoint := testserver.EtcdEndpoint(t)
	t.Setenv("ETCDCTL_USER", "")
	t.Setenv("ETCDCTL_PASSWORD", "")
	prefix := etcd.EtcdPrefix(t, etcd.EtcdClient(t, endpoint))
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	return "etcd://" + u.Host + strings.TrimSuffix(prefix, "/")
}

// TestServerEtcd: latest, push, ls, brand, probe, race and settle on etcd.
func TestServerEtcd(t *testing.T) {
	serverScenario(t, etcdAddress(t), "")
}

// TestServerEtcdAuth: with authentication on, the command logs in with
// ETCDCTL_USER and ETCDCTL_PASSWORD; a wrong password fails the command
// without printing it.
func TestServerEtcdAuth(t *testing.T) {
	endpoint := testserver.StartEtcdT(t)
	ctx := t.Context()
	admin := etcd.EtcdClient(t, endpoint)
	_, err := admin.UserAdd(ctx, "root", "root-hunter2secret")
	require.NoError(t, err)
	_, err = admin.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)
	_, err = admin.AuthEnable(ctx)
	require.NoError(t, err)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	addr := "etcd://" + u.Host + "/mirrors"
	p := writeFile(t, "segment")

	t.Setenv("ETCDCTL_USER", "root")
	t.Setenv("ETCDCTL_PASSWORD", "root-hunter2secret")
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Setenv("ETCDCTL_PASSWORD", "")
	t.Setenv("ETCDCTL_USER", "root:root-hunter2secret")
	r = wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	root := etcd.EtcdClient(t, endpoint, func(c *clientv3.Config) { c.Username, c.Password = "root", "root-hunter2secret" })
	resp, err := root.Get(ctx, "/mirrors/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, 1, "the record lives under the address's prefix")

	t.Setenv("ETCDCTL_USER", "root:wrong-hunter2secret")
	r = wf(t, "latest", "-store", addr, "wal", "s")
	assert.NotEqual(t, exitOK, r.code, "%s", r)
	assert.NotContains(t, r.stdout+r.stderr, "hunter2secret")
	t.Setenv("ETCDCTL_USER", "")
	r = wf(t, "latest", "-store", addr, "wal", "s")
	assert.NotEqual(t, exitOK, r.code, "no credentials: %s", r)
}

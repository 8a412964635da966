package etcdstore_test

import (
	"testing"

	"github.com/writefence/writefence/etcdstore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/etcd"
	"github.com/writefence/writefence/internal/testserver"
)

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestModel runs the model (internal/modeltest) on etcd
// (WRITEFENCE_ETCD_ENDPOINT), where a write around the store is a new mod
// revision.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		c := etcd.EtcdClient(t, testserver.EtcdEndpoint(t))
		prefix := etcd.EtcdPrefix(t, c)
		return modeltest.Target{Name: "etcd", Rewrites: true, Store: etcdstore.New(c, prefix), Damage: etcd.DamageEtcd(c, prefix)}
	})
}

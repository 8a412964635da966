//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"testing"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/testserver"
)

// TestModelServers runs the model on the real servers: MinIO,
// fake-gcs-server, and Valkey on both write paths, standalone and with a
// replica that must acknowledge every write (WaitReplicas), and on the
// cluster .ci/run starts, with and without WaitReplicas. On the cluster the
// runs' keys share one hash tag, so that the brand key is in the record's
// slot and the writers under BrandVerifyAlways check it in their writes (a
// cluster refuses that across slots, as TestValkeyClusterBrand shows).
func TestModelServers(t *testing.T) {
	t.Parallel()
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			c, bucket := newMinioBucket(t)
			return modeltest.Target{Name: "minio", Rewrites: true, Store: writefence.NewMinioStore(c, bucket), Damage: testserver.DamageS3(c, bucket), ClockStep: time.Second}
		})
	})
	t.Run("gcs", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			c := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
			bucket := testserver.GCSBucket(t, c)
			return modeltest.Target{Name: "gcs", Rewrites: true, Store: writefence.NewGCSStore(c, bucket), Damage: testserver.DamageGCS(c, bucket)}
		})
	})
	for _, script := range []bool{false, true} {
		path := map[bool]string{false: "watch", true: "script"}[script]
		t.Run("valkey-"+path, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				c := newValkeyClient(t)
				s := writefence.NewValkeyStore(c)
				s.Script = script
				return modeltest.Target{Name: "valkey-" + path, Store: s, Damage: testserver.DamageValkey(c), Prefix: valkeyPrefix(t, c)}
			})
		})
		for _, wait := range []int{0, 1} {
			name := map[int]string{0: "valkey-cluster-", 1: "valkey-cluster-waiting-"}[wait] + path
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				modeltest.Run(t, func(t *testing.T) modeltest.Target {
					addrs := testserver.ValkeyClusterAddrs(t)
					c := testserver.ValkeyClusterClient(t, addrs)
					s := writefence.NewValkeyStore(c)
					s.Script, s.WaitReplicas, s.WaitTimeout = script, wait, testAckTimeout
					return modeltest.Target{Name: name, Store: s, Damage: testserver.DamageValkey(c), Prefix: testserver.ValkeyClusterPrefix(t, addrs, true)}
				})
			})
		}
		t.Run("valkey-replica-"+path, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				addr, primary := startPrimary(t)
				startReplica(t, primary, addr)
				s := writefence.NewValkeyStore(primary)
				s.Script, s.WaitReplicas, s.WaitTimeout = script, 1, testAckTimeout
				return modeltest.Target{Name: "valkey-replica-" + path, Store: s, Damage: testserver.DamageValkey(primary)}
			})
		})
	}
}

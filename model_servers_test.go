//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey

package writefence_test

import (
	"testing"
	"time"

	"github.com/writefence/writefence"
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
		runModel(t, func(t *testing.T) modelTarget {
			c, bucket := newMinioBucket(t)
			return modelTarget{name: "minio", rewrites: true, store: writefence.NewMinioConditionalStore(c, bucket), damage: testserver.DamageS3(c, bucket), clockStep: time.Second}
		})
	})
	t.Run("gcs", func(t *testing.T) {
		t.Parallel()
		runModel(t, func(t *testing.T) modelTarget {
			c := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
			bucket := testserver.GCSBucket(t, c)
			return modelTarget{name: "gcs", rewrites: true, store: writefence.NewGCSConditionalStore(c, bucket), damage: testserver.DamageGCS(c, bucket)}
		})
	})
	for _, script := range []bool{false, true} {
		path := map[bool]string{false: "watch", true: "script"}[script]
		t.Run("valkey-"+path, func(t *testing.T) {
			t.Parallel()
			runModel(t, func(t *testing.T) modelTarget {
				c := newValkeyClient(t)
				s := writefence.NewValkeyConditionalStore(c)
				s.Script = script
				return modelTarget{name: "valkey-" + path, store: s, damage: testserver.DamageValkey(c), prefix: valkeyPrefix(t, c)}
			})
		})
		for _, wait := range []int{0, 1} {
			name := map[int]string{0: "valkey-cluster-", 1: "valkey-cluster-waiting-"}[wait] + path
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				runModel(t, func(t *testing.T) modelTarget {
					addrs := testserver.ValkeyClusterAddrs(t)
					c := testserver.ValkeyClusterClient(t, addrs)
					s := writefence.NewValkeyConditionalStore(c)
					s.Script, s.WaitReplicas, s.WaitTimeout = script, wait, testAckTimeout
					return modelTarget{name: name, store: s, damage: testserver.DamageValkey(c), prefix: testserver.ValkeyClusterPrefix(t, addrs, true)}
				})
			})
		}
		t.Run("valkey-replica-"+path, func(t *testing.T) {
			t.Parallel()
			runModel(t, func(t *testing.T) modelTarget {
				addr, primary := startPrimary(t)
				startReplica(t, primary, addr)
				s := writefence.NewValkeyConditionalStore(primary)
				s.Script, s.WaitReplicas, s.WaitTimeout = script, 1, testAckTimeout
				return modelTarget{name: "valkey-replica-" + path, store: s, damage: testserver.DamageValkey(primary)}
			})
		})
	}
}

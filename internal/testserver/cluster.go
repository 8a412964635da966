package testserver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence/internal/testserver/launch"
)

// Valkey clusters: the shared one .ci/run starts (three primaries with a
// replica each, named by WRITEFENCE_VALKEY_CLUSTER), and clusters of a
// test's own, for what would disturb other tests (a resharding, a
// failover).

// ValkeyClusterAddrs returns the addresses of the nodes of the Valkey
// cluster named by the environment (WRITEFENCE_VALKEY_CLUSTER,
// comma-separated).
func ValkeyClusterAddrs(t testing.TB) []string {
	return strings.Split(Env(t, "WRITEFENCE_VALKEY_CLUSTER"), ",")
}

// ValkeyClusterClient returns a cluster client of the nodes at addrs that
// never retries a command (a retried write would hide what the tests look
// at), closed when the test ends. hooks are added to the client of every
// node, where the commands are sent (not to the cluster client, which
// would count a transaction of its own twice).
func ValkeyClusterClient(t testing.TB, addrs []string, hooks ...redis.Hook) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	c.OnNewNode(func(n *redis.Client) {
		for _, h := range hooks {
			n.AddHook(h)
		}
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ValkeyClusterPrefix returns a key prefix of the test's own on the
// cluster at addrs; its keys are deleted, on every primary, when the test
// ends. With tagged set the prefix is a hash tag, "{wf-…}/", which puts
// every key under it in one slot.
func ValkeyClusterPrefix(t testing.TB, addrs []string, tagged bool) string {
	t.Helper()
	prefix := UniqueName(t) + "/"
	if tagged {
		prefix = "{" + strings.TrimSuffix(prefix, "/") + "}/"
	}
	t.Cleanup(func() {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer c.Close()
		ctx, cancel := CleanupContext(t)
		defer cancel()
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, prefix+"*").Result()
			for _, k := range keys {
				if err == nil {
					err = m.Del(ctx, k).Err()
				}
			}
			return err
		})
		if err != nil {
			t.Errorf("cleanup: %s*: %v", prefix, err)
		}
	})
	return prefix
}

// ValkeyNode is a cluster-enabled valkey-server a test started.
type ValkeyNode struct {
	Addr    string        // its client address, 127.0.0.1:port
	BusPort string        // its cluster bus port
	Client  *redis.Client // a client of it that never retries
}

// Port returns the node's client port.
func (n ValkeyNode) Port() string {
	_, port, _ := net.SplitHostPort(n.Addr)
	return port
}

// StartValkeyNode starts a cluster-enabled valkey-server of the test's own
// (see StartValkey), on a free client port and a free bus port in
// 20000-32000 (the default bus port, the client port + 10000, would be in
// the ephemeral range), serving a full sync to a replica at once, with the
// given extra arguments. The node is in no cluster yet: see
// FormValkeyCluster.
func StartValkeyNode(t testing.TB, args ...string) ValkeyNode {
	t.Helper()
	needProgram(t, "valkey-server")
	p, n, err := launch.StartValkeyNode(t.TempDir(), args...)
	check(t, err)
	t.Cleanup(p.Stop)
	return ValkeyNode{Addr: n.Addr, BusPort: n.BusPort, Client: ValkeyClient(t, n.Addr, "")}
}

// FormValkeyCluster makes one cluster of primaries, which share the slots
// in order and evenly, and replicas, where replicas[i] replicates
// primaries[i%len(primaries)] (launch.FormValkeyCluster).
func FormValkeyCluster(t testing.TB, primaries, replicas []ValkeyNode) {
	t.Helper()
	nodes := func(ns []ValkeyNode) []launch.ValkeyNode {
		var l []launch.ValkeyNode
		for _, n := range ns {
			l = append(l, launch.ValkeyNode{Addr: n.Addr, BusPort: n.BusPort})
		}
		return l
	}
	check(t, launch.FormValkeyCluster(nodes(primaries), nodes(replicas)))
}

// ValkeyNodeID returns the cluster node ID of the node c talks to.
func ValkeyNodeID(t testing.TB, c *redis.Client) string {
	t.Helper()
	id, err := c.ClusterMyID(context.Background()).Result()
	check(t, err)
	return id
}

// WaitValkey polls cond every 10 ms until it holds, failing the test after
// 30 s. Tests poll only servers' own state this way (a cluster agreeing on
// its configuration, a replica's link), which changes on its own.
func WaitValkey(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// MigrateValkeySlot moves slot from the node src to the node dst the way
// valkey-cli --cluster reshard does, in its steps, so that a test can act
// between them: between runs while the slot is IMPORTING on dst and
// MIGRATING on src; then every key of the slot moves with MIGRATE, and
// the slot is assigned to dst, on both and then on every node in nodes.
func MigrateValkeySlot(t testing.TB, slot int, src, dst ValkeyNode, nodes []ValkeyNode, between func()) {
	t.Helper()
	ctx := context.Background()
	srcID, dstID := ValkeyNodeID(t, src.Client), ValkeyNodeID(t, dst.Client)
	check(t, dst.Client.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	check(t, src.Client.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	if between != nil {
		between()
	}
	host, port, err := net.SplitHostPort(dst.Addr)
	check(t, err)
	for {
		ks, err := src.Client.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		check(t, err)
		if len(ks) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range ks {
			args = append(args, k)
		}
		check(t, src.Client.Do(ctx, args...).Err())
	}
	for _, n := range append([]ValkeyNode{dst, src}, nodes...) {
		if err := n.Client.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
			t.Fatalf("cluster setslot %d node on %s: %v", slot, n.Addr, err)
		}
	}
}

// ValkeyInfoField returns one "name:value" field of INFO section from c.
func ValkeyInfoField(t testing.TB, c *redis.Client, section, name string) string {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	check(t, err)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

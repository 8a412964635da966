package writefence_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// startClusterValkey starts a valkey-server with cluster mode enabled on a
// free port in 20000-32000 and returns its address; it is stopped when the
// test ends. No slots are assigned: the store must refuse it before asking
// anything of its keys.
func startClusterValkey(t *testing.T) string {
	t.Helper()
	return startValkeyServer(t, "", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--logfile", "")
}

// keyCommandCalls sums calls, failed and rejected calls of the commands
// that touch keys, from INFO commandstats.
func keyCommandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int{}
	for line := range strings.Lines(stats) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k == "calls" || k == "failed_calls" || k == "rejected_calls" {
				n, err := strconv.Atoi(v)
				require.NoError(t, err, line)
				calls[strings.TrimPrefix(name, "cmdstat_")] += n
			}
		}
	}
	return calls
}

var valkeyKeyCommands = []string{"get", "getrange", "exists", "set", "del", "watch", "unwatch", "multi", "exec", "eval", "evalsha"}

func TestValkeyRefusesCluster(t *testing.T) {
	addr := startClusterValkey(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = cc.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })

	clients := []struct {
		name   string
		client redis.UniversalClient
		reason string
	}{
		{"standalone client to a cluster node", c, "cluster_enabled:1"},
		{"cluster client", cc, "*redis.ClusterClient"},
		{"ring", ring, "*redis.Ring"},
	}
	for _, cl := range clients {
		for _, path := range valkeyPaths {
			store := writefence.NewValkeyConditionalStore(cl.client)
			store.Script = path.script
			_, _, getErr := store.Get(ctx, "k")
			_, putErr := store.PutIfVersion(ctx, "k", []byte("x"), "")
			_, updateErr := store.PutIfVersion(ctx, "k", []byte("x"), strings.Repeat("0", 32))
			delErr := store.Delete(ctx, "k")
			for op, err := range map[string]error{"get": getErr, "create": putErr, "update": updateErr, "delete": delErr} {
				name := fmt.Sprintf("%s %s %s", cl.name, path.name, op)
				var unsupported *writefence.ValkeyUnsupportedError
				require.ErrorAs(t, err, &unsupported, name)
				assert.Contains(t, unsupported.Reason, cl.reason, name)
				assert.NotErrorIs(t, err, writefence.ErrNotFound, name)
				assert.NotErrorIs(t, err, writefence.ErrConflict, name)
			}
		}
	}

	calls := keyCommandCalls(t, c)
	assert.Positive(t, calls["info"], "the check asked the server")
	for _, cmd := range valkeyKeyCommands {
		assert.Zero(t, calls[cmd], "the server saw %s", cmd)
	}

	// The count above would see a key command: one sent now shows up.
	_ = c.GetRange(ctx, "k", 0, 1).Err()
	assert.Positive(t, keyCommandCalls(t, c)["getrange"], "a GETRANGE is counted")
}

//go:build !writefence_novalkey && !writefence_nosdk

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/writefence/writefence/internal/testserver"
)

// TestValkeyWaitWithoutReplicas: wait=1 on a server without replicas is
// refused before anything is read or written, saying why, rather than
// waiting and calling the outcome unknown (exit 8) with advice to repeat
// the push, which could never help.
func TestValkeyWaitWithoutReplicas(t *testing.T) {
	noValkeyPassword(t)
	server := testserver.StartValkey(t, "")
	p := writeFile(t, "segment")
	for _, args := range [][]string{
		{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"latest", "wal", "s"},
	} {
		r := wf(t, append(args, "-store", "valkey://"+server+"/0?wait=1&wait-timeout=30s")...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: "+server+" has 0 replicas online, fewer than wait=1 in the address: no write could be confirmed, so none was sent", "%v", args)
		assert.Contains(t, r.stderr, "(none: leave wait= out)", "%v", args)
		assert.NotContains(t, r.stderr, "repeat", "%v", args)
	}
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", "valkey://"+server+"/0", "wal", "s").code, "nothing was written")
}

// TestValkeyClusterNodeUnderValkeyScheme: a cluster's node addressed as a
// standalone server says to use valkey+cluster://, naming no Go type.
func TestValkeyClusterNodeUnderValkeyScheme(t *testing.T) {
	noValkeyPassword(t)
	node := testserver.ValkeyClusterAddrs(t)[0]
	r := wf(t, "latest", "-store", "valkey://"+node+"/0", "wal", "s")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: store address: "+node+" is a node of a cluster (cluster_enabled:1), which valkey:// does not serve: address the cluster as 'valkey+cluster://"+node+"'")
	assert.False(t, strings.Contains(r.stderr, "redis.") || strings.Contains(r.stderr, "*"), "no Go type: %s", r.stderr)
}

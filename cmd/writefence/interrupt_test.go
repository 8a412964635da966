package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestInterruptedEveryVerb: every command run under a context that an
// interrupt ended exits with the interrupt's status and claims no
// violation; one that writes says its write may have landed, one that
// reads that nothing was written. ls on an in-memory store ends so too,
// where there is nothing to list and no request that could notice the
// interrupt.
func TestInterruptedEveryVerb(t *testing.T) {
	addr, p := pushedStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"latest", "-store", addr, "wal", "s"},
			"writefence: latest interrupted (SIGINT or SIGTERM): inspect writefence/s/wal/s: context canceled; nothing was written\n"},
		{[]string{"ls", "-store", addr}, ""},
		{[]string{"push", "-store", addr, "-writer", "a", "-epoch", "2", "-file", p, "wal", "s"},
			"writefence: push interrupted (SIGINT or SIGTERM): context canceled; the push may have landed: run the same command again, which succeeds if it did, or writefence latest to see what the store holds\n"},
		{[]string{"blob", "put", "-store", addr, "-writer", "a", "-epoch", "2", "-file", p, "wal", "s"}, ""},
		{[]string{"commit", "-store", addr, "-writer", "a", "-epoch", "2", "-keep-payload", "wal", "s"}, ""},
		{[]string{"gc", "-store", addr, "wal", "s"}, ""},
		{[]string{"brand", "install", "-store", addr}, ""},
		{[]string{"probe", "-store", addr}, ""},
		{[]string{"race", "-store", addr}, ""},
		{[]string{"settle", "-store", addr, "-confirm-version", "v", "-writer", "a", "-epoch", "2", "-file", p, "wal", "s"}, ""},
		{[]string{"demo"}, ""},
		{[]string{"ls", "-store", "mem://"}, ""},
		{[]string{"ls", "-json", "-store", "mem://", "wal"}, ""},
	} {
		r := wfContext(ctx, c.args...)
		assert.Equal(t, exitInterrupted, r.code, "%v: %s", c.args, r)
		assert.NotContains(t, strings.ToLower(r.stdout+r.stderr), "violation", "%v: %s", c.args, r)
		assert.Contains(t, r.stderr, c.says, "%v", c.args)
	}
}

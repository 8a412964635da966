package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInterruptedSaysWhatToDo: a command a signal interrupted says so, and
// what it may have left: a write that may have landed, or nothing.
func TestInterruptedSaysWhatToDo(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "-store", addr, "-writer", "a", "-epoch", "2", "-file", p, "wal", "s"},
			"writefence: push interrupted (SIGINT or SIGTERM): context canceled; the push may have landed: run the same command again, which succeeds if it did, or writefence latest to see what the store holds\n"},
		{[]string{"latest", "-store", addr, "wal", "s"},
			"writefence: latest interrupted (SIGINT or SIGTERM): inspect writefence/s/wal/s: context canceled; nothing was written\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, c.args, &stdout, &stderr)
		assert.Equal(t, exitInterrupted, code, "%v: %s", c.args, stderr.String())
		assert.Contains(t, stderr.String(), c.want, "%v", c.args)
	}
}

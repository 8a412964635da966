package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	for _, args := range [][]string{nil, {"-writers", "1", "-epochs", "1"}, {"-writers", "32", "-epochs", "200", "-seed", "7"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"demo"}, args...), &stdout, &stderr)
		require.Equal(t, exitOK, code, "args %v\nstdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
		out := stdout.String()
		assert.Contains(t, out, "leader-a  epoch 2   refused  writefence: stale epoch")
		assert.Contains(t, out, "invariants hold")
		assert.Equal(t, 1, strings.Count(out, "landed   \"written by twin-"), "exactly one twin lands:\n%s", out)
		assert.NotContains(t, out, "VIOLATION")
	}
}

// TestInvariantCheckFails: the demo's check is not decorative; a log of
// landings out of order is reported and exits non-zero.
func TestInvariantCheckFails(t *testing.T) {
	ctx := context.Background()
	log := &landingLog{}
	log.reader.Store = &log.store
	var lines []string
	out := func(format string, a ...any) { lines = append(lines, format) }

	log.epochs = []uint64{1, 3, 3}
	assert.Equal(t, exitViolation, checkInvariants(ctx, out, log, &log.reader, 3))
	assert.Contains(t, strings.Join(lines, "\n"), "VIOLATION")
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, run(context.Background(), nil, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "demo")
	assert.Equal(t, exitUsage, run(context.Background(), []string{"nope"}, &stdout, &stderr))
	assert.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stdout, &stderr))
	assert.Equal(t, exitUsage, run(context.Background(), []string{"demo", "-writers", "0"}, &stdout, &stderr))
}

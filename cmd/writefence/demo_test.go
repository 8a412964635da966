package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	for _, args := range [][]string{nil, {"-writers", "1", "-epochs", "1"}, {"-writers", "32", "-epochs", "200", "-seed", "7"}} {
		r := wf(t, append([]string{"demo"}, args...)...)
		require.Equal(t, exitOK, r.code, "args %v\n%s", args, r)
		assert.Contains(t, r.stdout, "leader-a  epoch 2   refused  writefence: stale epoch")
		assert.Contains(t, r.stdout, "invariants hold")
		assert.Equal(t, 1, strings.Count(r.stdout, "landed   \"written by twin-"), "exactly one twin lands:\n%s", r.stdout)
		assert.NotContains(t, r.stdout, "VIOLATION")
	}
	assert.Equal(t, exitUsage, wf(t, "demo", "-writers", "0").code)
}

// TestInvariantCheckFails: the demo's check is not decorative; a log of
// landings out of order is reported and exits with the violation status.
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

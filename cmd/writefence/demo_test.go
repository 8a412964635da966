package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/hook"
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

// TestDemoInterrupted: an interrupt during the demo ends it with the
// interrupt's status, and it claims no violation: the pushes it cut short
// broke no invariant. The context is cancelled inside the fence's write
// engine, at a chosen write of each scene.
func TestDemoInterrupted(t *testing.T) {
	// One racer climbing 10 epochs writes 10 times: write 10 is in the
	// race whatever the twins did (one write or two), write 4 a twin's.
	for _, at := range []int64{1, 3, 4, 10} {
		for _, asJSON := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			var writes atomic.Int64
			ctx = hook.With(ctx, &hook.Hooks{Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
				v, err := write()
				if writes.Add(1) == at {
					cancel()
				}
				return v, err
			}})
			args := []string{"demo", "-writers", "1", "-epochs", "10"}
			if asJSON {
				args = append(args, "-json")
			}
			r := wfContext(ctx, args...)
			cancel()
			require.Equal(t, exitInterrupted, r.code, "write %d, %v: %s", at, args, r)
			assert.NotContains(t, strings.ToLower(r.stdout+r.stderr), "violation", "write %d: %s", at, r)
			assert.Contains(t, r.stderr, "writefence demo: interrupted: context canceled", "write %d", at)
			if asJSON {
				lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
				assert.Contains(t, lines[len(lines)-1], `"outcome":"interrupted"`, "write %d", at)
			}
		}
	}
}

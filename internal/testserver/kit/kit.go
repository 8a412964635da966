// Package kit runs the conformance suite (writefencetest) and the probe
// on the stores of the adapter modules on their real servers, with the
// options those runs share, so that each module's integration tests hold
// only what is the module's own. It is apart from testserver because the
// package writefence's own tests use testserver, and kit uses writefence.
package kit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// Options are the suite's options for a store whose read limit is
// readLimit and whose bytes damage reaches from outside it, with
// Get/UnderOverwrite sized as testserver.KitOverwriteReads says.
func Options(damage testserver.Damager, readLimit int64) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit:      readLimit,
		OverwriteReads: testserver.KitOverwriteReads(),
	}
}

// Run runs the suite on store with Options(damage, readLimit).
func Run(t *testing.T, store writefence.ConditionalStore, damage testserver.Damager, readLimit int64) {
	t.Helper()
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, Options(damage, readLimit))
}

// Probe checks that writefence.Probe trusts store and leaves no key
// behind, and that a Fence with Probe set pushes through it.
func Probe(t *testing.T, store interface {
	writefence.ConditionalStore
	writefence.Lister
}) {
	t.Helper()
	require.NoError(t, writefence.Probe(t.Context(), store, "probe/scratch"))
	assert.Empty(t, testserver.Keys(t, store), "the probe cleans up")
	f := &writefence.Fence{Store: store, Probe: true}
	require.NoError(t, f.Push(t.Context(), "wal", "0", "node-a", 1, []byte("segment")))
}

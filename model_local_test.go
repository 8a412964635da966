package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/testserver"
)

// TestModel runs the model on the stores of the unit tier: MemStore, and
// the directory store.
func TestModel(t *testing.T) {
	restore, err := modeltest.SetFlags(modeltest.ChecksUnit)
	require.NoError(t, err)
	t.Cleanup(restore) // after the subtests, which run in parallel
	t.Run("mem", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			m := &writefence.MemStore{}
			return modeltest.Target{Name: "mem", Rewrites: true, Store: m, Damage: testserver.DamageByOverwrite(m)}
		})
	})
	t.Run("dir", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			dir := t.TempDir()
			s, err := writefence.NewDirStore(dir)
			require.NoError(t, err)
			return modeltest.Target{Name: "dir", Store: s, Damage: testserver.DamageDir(dir)}
		})
	})
}

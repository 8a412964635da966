package writefence_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// What the tests of the stores share: the conformance suite's options
// for the adapters; and the model test on the stores of the unit tier
// (on the servers' in store_servers_test.go).

// kitReadLimit is the read limit the adapters' conformance runs set on
// their stores, so the suite checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// kitOptions are the conformance suite's options for a store whose bytes
// damage reaches from outside it and whose read limit is kitReadLimit,
// with Get/UnderOverwrite sized as testserver.KitOverwriteReads says.
func kitOptions(damage testserver.Damager) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit:      kitReadLimit,
		OverwriteReads: testserver.KitOverwriteReads(),
	}
}

// kitOverwrite starts the name of the kit's check that the MinIO and GCS
// tests run apart (TestMinioUnderOverwrite, TestGCSUnderOverwrite).
const kitOverwrite = "Get/U"

// kitAllBut returns an Options.Only that runs every check of the kit but
// those whose name (Group/Check) starts with prefix, so that a test of
// their own runs them beside the rest (Only: "^" + prefix): Go's regular
// expressions have no negative lookahead.
func kitAllBut(prefix string) string {
	alts := make([]string, len(prefix))
	for i := range prefix {
		alts[i] = regexp.QuoteMeta(prefix[:i]) + "[^" + regexp.QuoteMeta(prefix[i:i+1]) + "]"
	}
	return "^(?:" + strings.Join(alts, "|") + ")"
}

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

package writefence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestCheck: before and after a takeover, and each refusal.
func TestCheck(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		a, b := &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		require.NoError(t, a.Seal(ctx, "wal", "0", "a", 10))
		require.NoError(t, a.Commit(ctx, "wal", "0", "a", 12, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil }))
		for _, e := range []uint64{10, 11, 12} {
			require.NoError(t, a.Check(ctx, "wal", "0", "a", e), "epoch %d of the tenure", e)
		}
		requireRegressed(t, a.Check(ctx, "wal", "0", "a", 13),
			writefence.EpochRegressedError{Op: "check", Key: key, Epoch: 13, Seen: 13, SeenWriter: "a", Found: 12, FoundWriter: "a"})

		require.NoError(t, b.Seal(ctx, "wal", "0", "b", 20))
		err := a.Check(ctx, "wal", "0", "a", 12)
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, writefence.StaleEpochError{Op: "check", Key: key, Epoch: 12, RecordedEpoch: 20, RecordedWriter: "b"}, *se)
		assert.Equal(t, "writefence: stale epoch: check at epoch 12 to "+key+" refused: recorded epoch 20 by b", err.Error())
		require.NoError(t, b.Check(ctx, "wal", "0", "b", 20))
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 19), writefence.ErrStaleEpoch, "below the seal's tenure")

		errs := a.CheckAll(ctx, []writefence.Tenure{
			{Plugin: "wal", Shard: "0", Writer: "a", Epoch: 12},
			{Plugin: "wal", Shard: "0", Writer: "b", Epoch: 20},
			{Plugin: "wal", Shard: "1", Writer: "b", Epoch: 20},
			{Plugin: "", Shard: "0", Writer: "b", Epoch: 20},
		})
		require.Len(t, errs, 4)
		assert.ErrorIs(t, errs[0], writefence.ErrStaleEpoch)
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], writefence.ErrEpochRegressed, "a shard without a record holds nobody")
		assert.ErrorIs(t, errs[3], writefence.ErrInvalidArgument)

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		for _, err := range a.CheckAll(canceled, make([]writefence.Tenure, 40)) {
			assert.Error(t, err)
		}

		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 0), writefence.ErrInvalidArgument)
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "", 20), writefence.ErrInvalidArgument)
		other := &writefence.Fence{Store: s, Identity: "other/v1"}
		require.ErrorIs(t, other.Check(ctx, "wal", "0", "b", 20), writefence.ErrWire)
		setBack(t, s, key, []byte("garbage"))
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 20), writefence.ErrCorrupt)
	})
}

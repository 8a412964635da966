package writefence_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

func TestSealKeepsPayload(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	require.NoError(t, f.Push(ctx, "wal", "0", "old", 3, []byte("segment 3")))

	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 10))
	requireLatest(t, f, 10, "new", "segment 3")
	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 10), "a repeated seal is a success")

	for _, epoch := range []uint64{4, 9, 10} {
		err := f.Push(ctx, "wal", "0", "old", epoch, []byte("late"))
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se, "epoch %d", epoch)
		assert.Equal(t, uint64(10), se.RecordedEpoch)
		assert.Equal(t, "new", se.RecordedWriter)
	}
	err := f.Seal(ctx, "wal", "0", "other", 10)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch, "another writer at the sealed epoch")
	require.ErrorIs(t, f.Seal(ctx, "wal", "0", "new", 9), writefence.ErrStaleEpoch)
	require.NoError(t, f.Push(ctx, "wal", "0", "new", 11, []byte("segment 11")))
	requireLatest(t, f, 11, "new", "segment 11")
}

// TestSealAbsentShard: a shard never pushed is sealed with an empty
// payload, so a deposed writer cannot create it at a lower epoch.
func TestSealAbsentShard(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 5))
	requireLatest(t, f, 5, "new", "")
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "old", 4, []byte("x")), writefence.ErrStaleEpoch)
}

func TestSealRefusals(t *testing.T) {
	ctx := t.Context()
	store := &writefence.MemStore{}
	f := &writefence.Fence{Store: store}
	key := mustKey(t, "wal", "0")
	_, err := store.PutIfVersion(ctx, key, []byte("not a record"), "")
	require.NoError(t, err)
	require.ErrorIs(t, f.Seal(ctx, "wal", "0", "new", 5), writefence.ErrCorrupt)
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "not a record", string(data), "a corrupt record is never overwritten")

	other := &writefence.Fence{Store: store, Identity: "other/v1"}
	require.NoError(t, other.Push(ctx, "wal", "1", "w", 1, []byte("x")))
	require.ErrorIs(t, f.Seal(ctx, "wal", "1", "new", 5), writefence.ErrWire)

	for name, err := range map[string]error{
		"epoch 0": f.Seal(ctx, "wal", "2", "new", 0),
		"writer":  f.Seal(ctx, "wal", "2", "", 5),
		"shard":   f.Seal(ctx, "wal", "", "new", 5),
	} {
		assert.ErrorIs(t, err, writefence.ErrInvalidArgument, name)
	}
}

// TestSealCarriesTheLatestPayload: a push that lands between Seal's read
// and its write makes the write conflict; Seal reads again and carries the
// new payload forward, never the one it read first.
func TestSealCarriesTheLatestPayload(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	old := &writefence.Fence{Store: mem}
	require.NoError(t, old.Push(ctx, "wal", "0", "old", 1, []byte("segment 1")))
	// Just before Seal's first conditional write reaches the store,
	// another writer's push lands.
	var once sync.Once
	store := fakestore.New(mem, fakestore.Options{Hide: fakestore.All, Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.Put {
			once.Do(func() { require.NoError(t, old.Push(ctx, "wal", "0", "old", 2, []byte("segment 2"))) })
		}
		return nil
	}})
	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 10))
	requireLatest(t, f, 10, "new", "segment 2")
}

func TestSealRetriesConflictsAndLostReplies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := counted(&writefence.MemStore{}, conflicts(3))
	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 2))
	assert.Equal(t, [2]int64{4, 1}, [2]int64{store.Calls(fakestore.Put), store.OK(fakestore.Put)}, "3 writes refused, then the one that landed")
	requireLatest(t, f, 2, "new", "")

	store.Inject(conflicts(0))
	f = &writefence.Fence{Store: store, MaxAttempts: 3}
	require.ErrorIs(t, f.Seal(ctx, "wal", "0", "new", 3), writefence.ErrConflict)

	var blackout atomic.Bool // set: every read fails once a write has been attempted
	var lost fakestore.Store
	lost = fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All, After: func(_ context.Context, c fakestore.Call, err error) error {
		if c.Op == fakestore.Put && blackout.Load() {
			lost.Inject(readsFail)
		}
		return err
	}})
	f = &writefence.Fence{Store: lost}
	require.NoError(t, f.Push(ctx, "wal", "0", "old", 1, []byte("segment 1")))
	lost.Inject(lostReplies(1))
	require.NoError(t, f.Seal(ctx, "wal", "0", "new", 2), "the seal landed; a read proves it")
	requireLatest(t, f, 2, "new", "segment 1")

	// The reply is lost and then the store cannot be read: the seal may
	// or may not have landed, and the error says so.
	lost.Inject(lostReplies(1))
	blackout.Store(true)
	err := f.Seal(ctx, "wal", "0", "new", 3)
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
	lost.Clear(fakestore.Get)
	requireLatest(t, f, 3, "new", "segment 1")
}

package writefence_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/testserver"
)

// TestPushOverDamagedPayload: a record whose payload was damaged past its
// intact header, on each class of store (see the package documentation,
// "Damage"):
//
//   - a store that keeps its version beside its bytes (the directory
//     store), damaged in place: the store's own check finds it on the
//     push's head read, which returns no more than the header's bytes, and
//     the push refuses with ErrCorrupt;
//   - a store without a PrefixReader (MemStore): the push reads the record
//     whole and refuses it;
//   - a store whose versions name its bytes, as S3's ETags do, rewritten
//     whole from outside (a new version): the push decides on the sound
//     head and replaces it; Latest and Update, which read the payload,
//     refuse it.
func TestPushOverDamagedPayload(t *testing.T) {
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 3*defaults.MaxHeaderSize)
	key := mustKey(t, "wal", "0")

	t.Run("in place, dir", func(t *testing.T) {
		dir := t.TempDir()
		store := fakestore.New(newDirStore(t, dir), fakestore.Options{})
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		require.NoError(t, testserver.DamageDir(dir)(ctx, key, testserver.Fault{Flip: -1}))
		read := store.BytesRead()
		err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it"))
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a Push overwrote damage in place")
		assert.LessOrEqual(t, store.BytesRead()-read, int64(defaults.MaxHeaderSize))
	})

	// rewrite damages the record's last byte by a write from outside.
	rewrite := func(t *testing.T, store writefence.ConditionalStore) {
		data, v, err := store.Get(ctx, key)
		require.NoError(t, err)
		data[len(data)-1] ^= 1
		_, err = store.PutIfVersion(ctx, key, data, v)
		require.NoError(t, err)
		_, _, _, err = (&writefence.Fence{Store: store}).Latest(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrCorrupt, "the record is corrupt")
	}

	t.Run("rewritten, no prefix reader", func(t *testing.T) {
		store := &writefence.MemStore{}
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		rewrite(t, store)
		err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it"))
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a Push that reads the record whole overwrote it")
	})

	t.Run("rewritten, prefix reader", func(t *testing.T) {
		store := newPrefixStore()
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		rewrite(t, store)
		err := (&writefence.Fence{Store: store}).Update(ctx, "wal", "0", "b", 2, func(p []byte) ([]byte, error) { return p, nil })
		require.ErrorIs(t, err, writefence.ErrCorrupt, "Update reads the payload")
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it")))
		requireLatest(t, &writefence.Fence{Store: store}, 2, "b", "over it")
	})
}

package writefence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// TestDeleteBlobs: DeleteBlobs deletes in one call of the store's
// BlobBatchDeleter when the store declares one, which reports a missing
// key deleted too; else with DeleteBlob of each key in turn, up to the
// first failure, returning the keys deleted before it and that failure.
// No keys is no call; a store that holds no blobs is unsupported.
func TestDeleteBlobs(t *testing.T) {
	ctx := t.Context()
	keys := []string{"b/1", "b/2", "b/3"}
	filled := func(t *testing.T) *writefence.MemStore {
		mem := &writefence.MemStore{}
		for _, k := range keys {
			_, err := mem.CreateBlob(ctx, k, strings.NewReader(k))
			require.NoError(t, err)
		}
		return mem
	}

	t.Run("batch", func(t *testing.T) {
		mem := filled(t)
		s := fakestore.New(mem, fakestore.Options{})
		deleted, err := writefence.DeleteBlobs(ctx, s, append(keys, "b/missing"))
		require.NoError(t, err)
		assert.ElementsMatch(t, append(keys, "b/missing"), deleted)
		assert.EqualValues(t, 1, s.Calls(fakestore.DeleteBlobs))
		assert.Zero(t, s.Calls(fakestore.DeleteBlob))
		assert.Empty(t, listBlobs(t, mem, ""))
	})
	t.Run("one by one", func(t *testing.T) {
		mem := filled(t)
		errDown := errors.New("down")
		s := fakestore.New(mem, fakestore.Options{Hide: fakestore.BlobBatchDeleter,
			Faults: []fakestore.Fault{{Op: fakestore.DeleteBlob, Key: "b/2", Err: errDown}}})
		deleted, err := writefence.DeleteBlobs(ctx, s, keys)
		require.ErrorIs(t, err, errDown)
		assert.Equal(t, []string{"b/1"}, deleted)
		assert.EqualValues(t, 2, s.Calls(fakestore.DeleteBlob), "none after the failure")
		assert.Zero(t, s.Calls(fakestore.DeleteBlobs))
		left := listBlobs(t, mem, "")
		assert.Len(t, left, 2)
		assert.Contains(t, left, "b/2")
		assert.Contains(t, left, "b/3")
	})
	t.Run("no keys", func(t *testing.T) {
		s := fakestore.New(filled(t), fakestore.Options{})
		deleted, err := writefence.DeleteBlobs(ctx, s, nil)
		require.NoError(t, err)
		assert.Empty(t, deleted)
		assert.Zero(t, s.Calls(fakestore.DeleteBlobs)+s.Calls(fakestore.DeleteBlob))
	})
	t.Run("no blobs", func(t *testing.T) {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.Declared})
		_, err := writefence.DeleteBlobs(ctx, s, keys)
		require.ErrorIs(t, err, errors.ErrUnsupported)
	})
}

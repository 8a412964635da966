package writefence_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestDirStoreOptions: the directory store's constructor reads the fields
// that name it, together: ReadOnly opens the existing store for reading
// (fs.ErrNotExist where there is none, fs.ErrPermission for every write)
// and MaxObjectSize is its read limit, whether or not it is read-only; a
// writable store refuses to write more.
func TestDirStoreOptions(t *testing.T) {
	ctx := t.Context()
	_, err := writefence.NewDirConditionalStore(filepath.Join(t.TempDir(), "none"), &writefence.StoreOptions{ReadOnly: true, MaxObjectSize: 10})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	require.ErrorIs(t, err, fs.ErrNotExist)

	dir := t.TempDir()
	w, err := writefence.NewDirConditionalStore(dir, nil)
	require.NoError(t, err)
	v, err := w.PutIfVersion(ctx, "big", make([]byte, 20), "")
	require.NoError(t, err)

	small, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{MaxObjectSize: 10})
	require.NoError(t, err)
	_, _, err = small.Get(ctx, "big")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, err = small.PutIfVersion(ctx, "other", make([]byte, 11), "")
	require.Error(t, err, "a write over the limit is refused")
	_, _, err = small.Get(ctx, "other")
	require.ErrorIs(t, err, writefence.ErrNotFound, "and wrote nothing")

	r, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{ReadOnly: true, MaxObjectSize: 10})
	require.NoError(t, err)
	_, _, err = r.Get(ctx, "big")
	require.ErrorIs(t, err, writefence.ErrTooLarge, "the read-only store keeps the read limit")
	_, _, _, err = writefence.GetPrefix(ctx, r, "big", 30)
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, err = r.PutIfVersion(ctx, "big", []byte("x"), v)
	require.ErrorIs(t, err, fs.ErrPermission)

	// A Fence over the read-only store: its push is refused, final.
	f := &writefence.Fence{Store: r}
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")), fs.ErrPermission)
}

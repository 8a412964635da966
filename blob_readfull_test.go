package writefence_test

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// TestReadFullOfADamagedBlob: OpenBlob's reader checks the blob's checksum
// on the read that brings its last byte, so a caller that reads exactly
// the reference's size (io.ReadFull) gets ErrCorrupt for a damaged blob,
// as one that reads to io.EOF does, never the bytes without an error.
// Here one data byte of a committed blob on a directory store is flipped
// on disk, the file's length unchanged.
func TestReadFullOfADamagedBlob(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store, err := writefence.NewDirStore(dir)
	require.NoError(t, err)
	f := &writefence.Fence{Store: store}
	const data = "a segment whose length is known"
	ref := putBlob(t, f, "a", 1, data)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(ref)))

	key, err := keys.Blob("", "wal", "0", ref.Name)
	require.NoError(t, err)
	path := blobFile(dir, key)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	at := 7 + len(key) + 3 // the fourth byte of the data
	file[at] ^= 0x20
	require.NoError(t, os.WriteFile(path, file, 0o600))

	// Read to EOF: the damage is found.
	_, err = readBlob(t, f, ref.Name)
	require.ErrorIs(t, err, writefence.ErrCorrupt, "read to io.EOF")

	// Read exactly the size the reference gives.
	rc, got, err := f.OpenBlob(ctx, "wal", "0", ref.Name)
	require.NoError(t, err)
	defer rc.Close()
	buf := make([]byte, got.Size)
	_, err = io.ReadFull(rc, buf)
	assert.ErrorIs(t, err, writefence.ErrCorrupt, "read of exactly ref.Size bytes")
}

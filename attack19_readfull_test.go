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

// TestAttack19ReadFullOfADamagedBlob shows OpenBlob's reader handing out
// every byte of a damaged blob with no error to a caller that reads
// exactly the size the reference gives (promise: a blob's checksum is
// checked on every read; a mismatch is ErrCorrupt, never wrong bytes).
//
// Sequence: a blob is put and committed in a directory store; one byte of
// its data is flipped in its file on disk (damage to stored bytes; the
// file's length is unchanged). A reader opens it through the record and
// reads it with io.ReadFull into a buffer of ref.Size bytes (or
// io.CopyN(w, rc, ref.Size)), the usual way to read a body whose length
// is known. The reader has then seen all ref.Size bytes, so it holds
// everything the CRC-32C check needs, but it only checks when the
// underlying read returns io.EOF, which a read of exactly the size never
// asks for. The package doc says a caller trusts the bytes only once it
// has read to io.EOF; this test records that the check is skippable by
// the idiomatic read, not that the doc is silent.
//
// Expected: the read that completes ref.Size bytes returns ErrCorrupt.
// Observed: io.ReadFull returns nil and the damaged bytes.
func TestAttack19ReadFullOfADamagedBlob(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store, err := writefence.NewDirConditionalStore(dir)
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
	assert.Equal(t, data, string(buf), "the bytes handed out without an error")
}

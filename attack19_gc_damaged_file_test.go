package writefence_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// TestAttack19OneDamagedBlobFileStopsEveryCollect shows that, on a
// directory store, one blob file whose header is damaged stops Collect
// from reclaiming anything, in every shard of the store, for good
// (promise: Collect reclaims everything but the referenced blobs and
// those within the grace rule; it fails closed over a damaged or foreign
// manifest, which this is not).
//
// Sequence: in shard "0", a commits a blob at epoch 1 and uploads a second
// one it never commits; b seals at epoch 2, so a's uncommitted blob can
// never be committed and is due at once. In another shard, "1", a blob
// file's header is damaged on disk (the file is cut to 5 bytes: damage to
// stored bytes). The directory store's ListBlobs reads every blob file of
// the store to learn its key, reports the damaged file as a
// *CorruptError after listing the rest, and Collect returns that error
// before it deletes anything. Nothing in the package can remove the
// damaged file (it cannot be named), so shard "0" is never collected
// again until an operator deletes the file by hand.
//
// Expected: Collect of shard "0" deletes a's uncommitted blob (a damaged
// file it cannot name is not one it may delete, but it does not make the
// blobs it can name less collectable), and may report the damage.
// Observed: Collect fails with ErrCorrupt ("holds no readable key of its
// name") and deletes nothing.
func TestAttack19OneDamagedBlobFileStopsEveryCollect(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store, err := writefence.NewDirConditionalStore(dir)
	require.NoError(t, err)
	f := &writefence.Fence{Store: store}

	kept := putBlob(t, f, "a", 1, "a's committed segment")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(kept)))
	doomed := putBlob(t, f, "a", 1, "a's uncommitted segment")
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2))

	other, err := f.PutBlob(ctx, "wal", "1", "c", 1, strings.NewReader("another shard's blob"))
	require.NoError(t, err)
	otherKey, err := keys.Blob("", "wal", "1", other.Name)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(blobFile(dir, otherKey), 5))

	report, cerr := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	doomedKey, kerr := keys.Blob("", "wal", "0", doomed.Name)
	require.NoError(t, kerr)
	_, serr := store.StatBlob(ctx, doomedKey)
	assert.ErrorIs(t, serr, writefence.ErrNotFound, "a's uncommitted blob, below b's tenure, is collected (%d deleted; collect: %v)", len(report.Deleted), cerr)
}

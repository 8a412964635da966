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

// TestCollectPastAnUnnameableBlobFile: on a directory store, a blob file
// whose header is damaged (cut to 5 bytes), which the store cannot name,
// stops no collection: Collect of another shard deletes what it can name
// and judge (a deposed writer's blob, below the successor's tenure) and
// then reports the damage; the damaged file, which it cannot name, it
// leaves alone.
func TestCollectPastAnUnnameableBlobFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store, err := writefence.NewDirStore(dir)
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

package writefence_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestAttack19OpenBlobRacingCollectReportsCorruption shows OpenBlob
// reporting ErrCorrupt ("a referenced blob is missing") on a store that
// holds no damage, when the blob it opens is dropped from the manifest
// and collected between OpenBlob's read of the record and its open of the
// blob (promises: a mismatch is ErrCorrupt, and ErrCorrupt means damage
// an operator settles; Collect is safe to run from many processes at
// once, readers included).
//
// Sequence: a commits blob x at epoch 2. b takes over (seal at epoch 3,
// which carries x forward) and commits at epoch 4 a compaction that drops
// x. Collect then deletes x at once, with no grace: a's blob is below
// b's tenure floor. A reader's OpenBlob of x read the record at epoch 3
// (which references x) and is about to open the blob; the commit and the
// collection run in that gap (a hook in the blob store's OpenBlob, no
// sleep).
//
// Expected: OpenBlob returns ErrNotFound (x is no longer referenced; the
// reader re-reads the manifest), never ErrCorrupt: nothing is damaged.
// Observed: a *CorruptError "a referenced blob is missing", which the
// command maps to exit 6 with settle instructions.
func TestAttack19OpenBlobRacingCollectReportsCorruption(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	blobs := &attack19Blobs{MemStore: mem}
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}
	reader := &writefence.Fence{Store: mem, Blobs: blobs}
	collector := &writefence.Fence{Store: mem, Blobs: blobs}

	x := putBlob(t, a, "a", 2, "a's segment")
	require.NoError(t, a.Commit(ctx, "wal", "0", "a", 2, appendBlob(x)))
	require.NoError(t, b.Seal(ctx, "wal", "0", "b", 3))

	var once sync.Once
	blobs.beforeOpen = func(_ context.Context, key string) {
		if !strings.HasSuffix(key, x.Name) {
			return
		}
		once.Do(func() {
			require.NoError(t, b.Commit(ctx, "wal", "0", "b", 4, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted")}, nil
			}))
			report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
			require.NoError(t, err)
			require.Len(t, report.Deleted, 1, "x is collected at once")
		})
	}
	_, err := readBlob(t, reader, x.Name)
	assert.NotErrorIs(t, err, writefence.ErrCorrupt, "nothing in the store is damaged")
	assert.ErrorIs(t, err, writefence.ErrNotFound, "x is no longer referenced")
}

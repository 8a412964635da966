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
	"github.com/writefence/writefence/internal/fakestore"
)

// TestOpenBlobRacingCollectIsNotFound: a blob dropped from the manifest and
// collected between OpenBlob's read of the record and its open of the
// blob is ErrNotFound (OpenBlob reads the manifest again and finds it no
// longer referenced), never ErrCorrupt: nothing is damaged.
//
// Sequence: a commits blob x at epoch 2; b seals at epoch 3, carrying x
// forward, and in the gap (a hook in the blob store's OpenBlob, no sleep)
// commits at epoch 4 a compaction that drops x, and Collect deletes x at
// once (below b's tenure floor).
func TestOpenBlobRacingCollectIsNotFound(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	var beforeOpen func(key string) // set once the blob it waits for is committed
	blobs := fakestore.New(mem, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.OpenBlob && beforeOpen != nil {
			beforeOpen(c.Key)
		}
		return nil
	}})
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}
	reader := &writefence.Fence{Store: mem, Blobs: blobs}
	collector := &writefence.Fence{Store: mem, Blobs: blobs}

	x := putBlob(t, a, "a", 2, "a's segment")
	require.NoError(t, a.Commit(ctx, "wal", "0", "a", 2, appendBlob(x)))
	require.NoError(t, b.Seal(ctx, "wal", "0", "b", 3))

	var once sync.Once
	beforeOpen = func(key string) {
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

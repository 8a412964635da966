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

// TestCollectOverAPlainRecordAgreesWithCommit: over a plain record (format
// version 2, which carries no tenure floor of its own) Commit and Collect
// apply the same floor, the record's epoch, so a blob Collect judges never
// committable is refused by a commit that races it.
//
// Sequence: b uploads a blob at epoch 1; a pushes at epoch 3 (a plain
// record); Collect reads the record and judges b's blob never committable
// (another writer's, at an epoch not above 3); between that read and the
// delete (a hook in the blob store's DeleteBlob, no sleep), b seals at 4
// and tries to commit its epoch-1 blob at 5. Want: the commit refused
// (ErrInvalidArgument: before the tenure that began at 4), the blob
// deleted, and the manifest referencing no missing blob.
func TestCollectOverAPlainRecordAgreesWithCommit(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	var beforeDelete func(key string) // set once the blob it waits for exists
	blobs := fakestore.New(mem, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.DeleteBlobs && beforeDelete != nil {
			for _, k := range c.Keys {
				beforeDelete(k)
			}
		}
		return nil
	}})
	collector := &writefence.Fence{Store: mem, Blobs: blobs}
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}

	early := putBlob(t, b, "b", 1, "b's segment of epoch 1")
	require.NoError(t, a.Push(ctx, "wal", "0", "a", 3, []byte("a's state")))

	var once sync.Once
	raced := false
	var commitErr error
	beforeDelete = func(key string) {
		if !strings.HasSuffix(key, early.Name) {
			return
		}
		once.Do(func() {
			// b, at admissible epochs, between Collect's read of the
			// record and its delete.
			require.NoError(t, b.Seal(ctx, "wal", "0", "b", 4))
			commitErr = b.Commit(ctx, "wal", "0", "b", 5, appendBlob(early))
			raced = true
		})
	}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	require.True(t, raced, "the commit ran between Collect's read and its delete")
	require.ErrorIs(t, commitErr, writefence.ErrInvalidArgument, "b's epoch-1 blob is below the tenure b began at 4")

	info, err := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.NotContains(t, info.Blobs, early, "the recorded manifest does not reference b's epoch-1 blob")
	deleted := false
	for _, d := range report.Deleted {
		deleted = deleted || strings.HasSuffix(d.Key, early.Name)
	}
	assert.True(t, deleted, "Collect deleted b's epoch-1 blob")
	_, err = readBlob(t, collector, early.Name)
	assert.ErrorIs(t, err, writefence.ErrNotFound, "a blob no manifest references is not readable")
}
